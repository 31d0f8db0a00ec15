# `cmake --install build --prefix P`: the libraries, public headers, the `turbokv` CLI, a CMake
# package (find_package(turbokv) -> turbokv::turbokv, turbokv::engine) and a pkg-config file
# (turbokv.pc, the core library). The Python package installs with the `python` component
# (python/CMakeLists.txt). tests/install_consumer builds a program against such a tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TURBOKV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/turbokv)
set(installed_targets turbokv_core)
if(TARGET turbokv_engine)
  list(APPEND installed_targets turbokv_engine)
  # engine/<room>/x.hpp -> include/turbokv/engine/<room>/x.hpp (headers include each other as
  # "engine/<room>/x.hpp", found from include/turbokv).
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/engine/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/turbokv/engine
          COMPONENT devel FILES_MATCHING PATTERN "*.hpp")
endif()
install(TARGETS ${installed_targets} EXPORT turbokvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/turbokv DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT devel)
if(TARGET turbokv)
  install(TARGETS turbokv RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
  # The default model and its tokenizer, so an installed `turbokv generate` / `turbokv serve` runs
  # with no argument from any folder (found beside bin/ as share/turbokv/models/).
  install(FILES ${PROJECT_SOURCE_DIR}/models/kjv-llama-3M.bin ${PROJECT_SOURCE_DIR}/models/tok512.bin
                ${PROJECT_SOURCE_DIR}/models/README.md
          DESTINATION ${CMAKE_INSTALL_DATADIR}/turbokv/models COMPONENT cli)
endif()

install(EXPORT turbokvTargets NAMESPACE turbokv:: DESTINATION ${TURBOKV_CMAKE_DIR} COMPONENT devel)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/turbokvConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/turbokvConfig.cmake INSTALL_DESTINATION ${TURBOKV_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/turbokvConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/turbokvConfig.cmake ${PROJECT_BINARY_DIR}/turbokvConfigVersion.cmake
        DESTINATION ${TURBOKV_CMAKE_DIR} COMPONENT devel)

# pkg-config: relocatable (the prefix is found from the .pc file's own folder).
string(REGEX REPLACE "[^/]+" ".." TURBOKV_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(${CMAKE_CURRENT_LIST_DIR}/turbokv.pc.in ${PROJECT_BINARY_DIR}/turbokv.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/turbokv.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT devel)
