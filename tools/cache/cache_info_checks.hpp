// Extra checks `turbokv cache-info` runs on a loaded cache, beyond what load_prompt_cache checks.
// Each lives next to the code that owns the metadata it checks and registers itself, so that a
// build without the engine (-DTURBOKV_BUILD_ENGINE=OFF, which leaves out every tools/ file that
// includes engine/) still has cache-info, just without the engine's check.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "turbokv/cache_io.hpp"

namespace turbokv::tools {

// Throws turbokv::Error naming `path` when the cache's metadata is not what its owner accepts.
using CacheInfoCheck = std::function<void(const PromptCache& cache, const std::string& path)>;

inline std::vector<CacheInfoCheck>& cache_info_checks() {
  static std::vector<CacheInfoCheck> checks;
  return checks;
}

struct CacheInfoCheckRegistration {
  explicit CacheInfoCheckRegistration(CacheInfoCheck check) { cache_info_checks().push_back(std::move(check)); }
};

}  // namespace turbokv::tools
