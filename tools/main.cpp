// turbokv: the command line. Subcommands register themselves (command_registry.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "tools/command_registry.hpp"
#include "turbokv/error.hpp"
#include "turbokv/version.hpp"

namespace turbokv::tools {

std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

}  // namespace turbokv::tools

int main(int argc, char** argv) {
  using namespace turbokv::tools;
  CLI::App app{"turbokv: TurboQuant KV-cache compression for LLM inference"};
  app.set_version_flag("--version", std::string("turbokv ") + turbokv::version());
  app.require_subcommand(1);

  // Registration order follows static initialisation; sort so --help is stable.
  auto entries = command_registry();
  std::sort(entries.begin(), entries.end(),
            [](const CommandEntry& a, const CommandEntry& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (const auto& entry : entries) {
    auto* sub = app.add_subcommand(entry.name);
    runners[sub] = entry.setup(*sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const turbokv::Error& e) {
    std::fprintf(stderr, "turbokv: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "turbokv: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
