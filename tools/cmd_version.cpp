// `turbokv version`: the library version and the SIMD targets this build dispatches to.
#include <fmt/format.h>

#include "tools/command_registry.hpp"
#include "turbokv/version.hpp"

namespace turbokv::tools {
namespace {

const CommandRegistration registration{"version", [](CLI::App& app) {
  app.description("Print the library version");
  return [] {
    fmt::print("turbokv {}\n", turbokv::version());
    return 0;
  };
}};

}  // namespace
}  // namespace turbokv::tools
