# ctest install_consumer: installs the build tree into a scratch prefix, then builds
# consumer.cpp against it twice, through find_package(turbokv) and through pkg-config
# (turbokv.pc, core only), runs both and checks their output. Variables: BUILD_DIR, SOURCE_DIR,
# WORK_DIR, CXX, VERSION, SANITIZE (the build's -fsanitize list, which the consumer must share).
cmake_minimum_required(VERSION 3.25)
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_checked)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run_checked(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component devel)
run_checked(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component cli)
foreach(f lib/libturbokv_core.a include/turbokv/turboquant_cache.hpp include/turbokv/engine/runtime/session.hpp
          lib/cmake/turbokv/turbokvConfig.cmake lib/pkgconfig/turbokv.pc bin/turbokv
          share/turbokv/models/kjv-llama-3M.bin share/turbokv/models/tok512.bin share/turbokv/models/README.md)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

# The installed CLI runs with no model argument from an unrelated folder, and looks for models in
# the installed share/turbokv/models beside its bin/ (named in the error for a missing one).
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=TURBOKV_MODELS_DIR ${prefix}/bin/turbokv generate
                        --prompt "In the beginning" -n 8
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^In the beginning.......")
  message(FATAL_ERROR "installed `turbokv generate` with no model failed (${rc}): ${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=TURBOKV_MODELS_DIR ${prefix}/bin/turbokv generate
                        --model no-such-model.bin -n 1
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "${prefix}/share/turbokv/models" at)
if(rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "a missing model's error does not name ${prefix}/share/turbokv/models (${rc}): ${err}")
endif()

set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=${SANITIZE}")
endif()
run_checked(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
            -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${flags}")
run_checked(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_checked(${WORK_DIR}/build/consumer)
message(STATUS "find_package consumer: ${last_output}")
if(NOT last_output MATCHES "^turbokv ${VERSION}: 100 tokens")
  message(FATAL_ERROR "unexpected output: ${last_output}")
endif()

# pkg-config: the core library alone (consumer.cpp's engine call needs the CMake package), so
# a smaller program.
file(WRITE ${WORK_DIR}/pc.cpp "#include <cstdio>\n#include \"turbokv/codec.hpp\"\n#include \"turbokv/version.hpp\"\n"
     "int main() { turbokv::TurboQuantMse c(turbokv::CodecOptions{});\n"
     "  std::printf(\"turbokv %s code_size %zu\\n\", turbokv::version(), c.code_size()); }\n")
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run_checked(pkg-config --cflags --libs turbokv)
string(STRIP "${last_output}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(extra UNIX_COMMAND "${flags}")
run_checked(${CXX} -std=c++20 ${extra} ${WORK_DIR}/pc.cpp -o ${WORK_DIR}/pc ${pc_flags})
run_checked(${WORK_DIR}/pc)
message(STATUS "pkg-config consumer: ${last_output}")
if(NOT last_output MATCHES "^turbokv ${VERSION} code_size 66")
  message(FATAL_ERROR "unexpected output: ${last_output}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
