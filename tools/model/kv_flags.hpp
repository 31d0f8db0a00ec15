// The KV-cache and model-path flags shared by `generate` and `serve`.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "turbokv/cache_config.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::tools {

// The flags fill the library's request (turbokv/cache_config.hpp), which kv_request_config turns
// into the cache: the same as the Python binding's keyword arguments build.
using KvFlags = KvRequest;

// Adds --kv-bits, --key-bits, --value-bits, --kv-codec, --kv-window, --kv-sinks, --kv-exact,
// --kv-attention, --cache.
void add_kv_flags(CLI::App& app, const std::shared_ptr<KvFlags>& flags, const std::string& default_text);

// "dense f16", "turboquant k4/v4 mse sinks 1 window 32", ...
std::string kv_cache_label(const CacheConfig& config);

}  // namespace turbokv::tools
