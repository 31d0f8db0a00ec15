// The KV-cache and model-path flags shared by `generate` and `serve`.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "turbokv/prompt_cache.hpp"

namespace turbokv::tools {

struct KvFlags {
  std::optional<double> kv_bits, key_bits, value_bits;
  std::string kv_codec = "mse";
  // Unset: 32 with a TurboQuant cache. The newest tokens exact is the strongest single lever for
  // quality (on kjv-llama-3M, 4-bit greedy text then follows the dense cache's instead of looping
  // after a few tokens); it costs 32 * 2 * head_dim floats per kv head and layer, whatever the
  // context length.
  std::optional<size_t> kv_window;
  // Unset: 1 with a TurboQuant cache. Keeping the BOS token exact costs 2*head_dim floats per kv
  // head and layer; at head_dim 8 (stories260K) its key norm is large enough that even 8-bit
  // codes move its logit by ~1 and flip near-ties (see the issue 5 note in docs/benchmarks.md).
  std::optional<size_t> kv_sinks;
  std::string cache_spec;
  std::optional<std::string> kv_exact;  // storage of sinks and window: f16 or f32
  // How attention multiplies TurboQuant codes (AttentionArithmetic): unset = int8 for the
  // caches these flags build (measured within 2% of the exact path's KL on kjv, several times
  // cheaper; docs/benchmarks.md), what the string says for --cache.
  std::optional<std::string> kv_attention;
};

// Adds --kv-bits, --key-bits, --value-bits, --kv-codec, --kv-window, --kv-sinks, --kv-exact,
// --kv-attention, --cache.
void add_kv_flags(CLI::App& app, const std::shared_ptr<KvFlags>& flags, const std::string& default_text);

// The cache the flags ask for; without any bits flag: `default_bits` TurboQuant bits (serve),
// or the dense fp16 cache when default_bits is empty (generate). The exact regions of a
// TurboQuant cache are stored as `default_exact` unless --kv-exact says otherwise. Throws
// turbokv::Error on a contradictory combination.
CacheConfig kv_cache_config(const KvFlags& flags, std::optional<double> default_bits, DenseDtype default_exact);

// "dense f16", "turboquant k4/v4 mse sinks 1 window 32", ...
std::string kv_cache_label(const CacheConfig& config);

}  // namespace turbokv::tools
