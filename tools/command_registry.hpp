// Self-registering subcommands: each tools/cmd_*.cpp defines a static CommandRegistration,
// so a new subcommand is one new file and main.cpp never changes.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace turbokv::tools {

// Adds the subcommand to `app`; returns the function to run when it is chosen (exit code).
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct CommandEntry {
  std::string name;
  CommandSetup setup;
};

std::vector<CommandEntry>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(setup)});
  }
};

}  // namespace turbokv::tools
