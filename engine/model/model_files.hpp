// Where a model named without a path is found. One list for the CLI, the server and the Python
// package, so that `turbokv generate`, `turbokv serve` and `turbokv.Model.default()` agree on it.
#pragma once

#include <string>
#include <vector>

namespace turbokv::engine {

// The model a command runs when none is named (llama2.c float32, tokenizer tok512.bin beside it).
inline constexpr const char* kDefaultModel = "kjv-llama-3M.bin";

// The folders a bare model name is looked up in, in order:
//   1. `first` (callers' own folders: the Python package's bundled models/),
//   2. the source checkout's models/ (a build tree; compiled in),
//   3. the installed share/turbokv/models/: beside the running executable (<prefix>/bin/..) and
//      the configured install prefix's,
//   4. the folder in the environment variable TURBOKV_MODELS_DIR, when set.
// Folders that do not exist are kept in the list (the error message names every place looked).
std::vector<std::string> model_search_dirs(const std::vector<std::string>& first = {});

// `name` itself when it exists or contains a '/' (a path: its own errors come from the loader);
// else the first folder of model_search_dirs(first) that holds a file of that name. Throws
// turbokv::Error listing every folder it looked in when none does.
std::string find_model_file(const std::string& name, const std::vector<std::string>& first = {});

}  // namespace turbokv::engine
