#include "engine/model/model_files.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "turbokv/error.hpp"

#ifndef TURBOKV_SOURCE_MODELS_DIR
#define TURBOKV_SOURCE_MODELS_DIR ""
#endif
#ifndef TURBOKV_INSTALLED_MODELS_DIR
#define TURBOKV_INSTALLED_MODELS_DIR ""
#endif

namespace turbokv::engine {
namespace fs = std::filesystem;

namespace {
// share/turbokv/models relative to the running program's bin/ folder, so a relocated install
// (`cmake --install build --prefix P`, then P moved) still finds its models.
std::string beside_executable() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return "";
  return (exe.parent_path().parent_path() / "share" / "turbokv" / "models").string();
}

void add_unique(std::vector<std::string>& dirs, const std::string& dir) {
  if (dir.empty()) return;
  for (const auto& d : dirs) {
    if (d == dir) return;
  }
  dirs.push_back(dir);
}
}  // namespace

std::vector<std::string> model_search_dirs(const std::vector<std::string>& first) {
  std::vector<std::string> dirs;
  for (const auto& d : first) add_unique(dirs, d);
  add_unique(dirs, TURBOKV_SOURCE_MODELS_DIR);
  add_unique(dirs, beside_executable());
  add_unique(dirs, TURBOKV_INSTALLED_MODELS_DIR);
  if (const char* env = std::getenv("TURBOKV_MODELS_DIR"); env != nullptr && *env != '\0') add_unique(dirs, env);
  return dirs;
}

std::string find_model_file(const std::string& name, const std::vector<std::string>& first) {
  std::error_code ec;
  if (name.find('/') != std::string::npos || fs::exists(name, ec)) return name;
  const std::vector<std::string> dirs = model_search_dirs(first);
  for (const auto& dir : dirs) {
    const fs::path candidate = fs::path(dir) / name;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  const char* env = std::getenv("TURBOKV_MODELS_DIR");
  throw Error(fmt::format("model '{}' not found in the current folder nor in {} ({}); give a path, or put the file "
                          "in one of these folders",
                          name, fmt::join(dirs, ", "),
                          env != nullptr && *env != '\0' ? fmt::format("TURBOKV_MODELS_DIR={}", env)
                                                          : std::string("TURBOKV_MODELS_DIR is not set")));
}

}  // namespace turbokv::engine
