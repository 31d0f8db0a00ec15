// cache-info's check of the engine.* metadata (engine/runtime/session_metadata.hpp): a cache a Session
// saved must be one `generate --load-cache` accepts, as far as that can be told without the model.
#include "engine/runtime/session_metadata.hpp"
#include "tools/cache/cache_info_checks.hpp"

namespace turbokv::tools {
namespace {

const CacheInfoCheckRegistration registration{[](const PromptCache& cache, const std::string& path) {
  if (engine::has_session_metadata(cache)) (void)engine::parse_session_metadata(cache, path);
}};

}  // namespace
}  // namespace turbokv::tools
