// Short configuration names for evaluation tables and command lines ("tq3", "k4v2", "q4_0h",
// "kivi2", ...) -> a CacheConfig (prompt_cache.hpp) that make_kv_cache builds.
//
// Grammar (case-sensitive; a list is comma-separated):
//   dense16 | dense32                     DenseKVCache, fp16 / f32
//   tq3.5 | tq4                           the best measured TurboQuant scheme within 3.5 / 4.25
//                                         bits per value at 256 positions, everything counted
//                                         (turboquant_scheme: k3v2s1w12-x16, k3v3s1w18-x16)
//   tq<B>                                 TurboQuant MSE, keys and values at B bits (1..8, or a
//                                         half width like 2.5, 3.5); tq3.5-plain and tq4-plain
//                                         (or k3.5v3.5, k4v4) are the uniform codecs the bare
//                                         names meant before issue 14
//   k<A>v<B>                              TurboQuant MSE, keys A bits, values B bits
//   prod<B>                               TurboQuant keys with the inner-product codec
//                                         ((B-1)-bit MSE + 1-bit QJL), values B-bit MSE
//     each TurboQuant name may continue with  s<N>  (first N tokens exact, "sinks") then
//     w<N>  (newest N tokens exact, "window"), then any of the flags
//     -nonc (no norm correction; it is on by default, -nc says so explicitly), -ctr (exact
//     centering on the sinks' mean, needs s<N>), -f32n (fp32 norms), -haar (dense Haar
//     rotation), -x16 (sinks and window stored in fp16), -i8 (attention in int8 arithmetic,
//     AttentionArithmetic::int8; also tq3.5-i8, tq4-i8): e.g. tq3w64, tq3s4w64, k4v2-nonc,
//     tq4s8-ctr, tq4-f32n, tq4s1w32-x16, tq4-plain-i8; -plain changes nothing (it names the
//     plain codec)
//   q8_0 | q4_0 | q8_0h | q4_0h           llama.cpp block types; h = Hadamard-rotated rows
//   kivi2 | kivi4 [r<N>]                  KIVI, residual N recent tokens (default 32)
//   affine4 | affine8 | affine2           mlx-lm QuantizedKVCache, group 64
//   kind:key=value,...                    the long form, parse_cache_config (prompt_cache.hpp),
//                                         e.g. "turboquant:bits=3,window=32"; a class's bare name
//                                         (dense, turboquant, kivi) is its defaults
// parse_kv_config is the one entry for every spelling: eval's --kv lists, decode-bench, the
// --cache flag of generate and serve, the Python binding's cache=, serve-bench's configs.
//
// A configuration that cannot apply to a shape (a group larger than, or not dividing, the head
// row) is "not applicable": kv_config_problem() says why, make_kv_cache throws
// NotApplicableError (a turbokv::Error), so a table can print "n/a" and go on.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "turbokv/error.hpp"
#include "turbokv/kv_cache.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv {

class NotApplicableError : public Error {
 public:
  using Error::Error;
};

// A KV-cache request as the front ends take it: `turbokv generate` / `serve` flags and the Python
// binding's keyword arguments (kv_bits=..., cache=...). kv_request_config() is the one place that
// turns it into a cache, so the same request builds the same cache from every front end.
struct KvRequest {
  std::optional<double> kv_bits, key_bits, value_bits;
  std::string codec = "mse";  // key codec: mse or prod
  // Unset: 32 with a TurboQuant cache. The newest tokens exact is the strongest single lever for
  // quality (on kjv-llama-3M, 4-bit greedy text then follows the dense cache's instead of looping
  // after a few tokens); it costs 32 * 2 * head_dim floats per kv head and layer, whatever the
  // context length.
  std::optional<size_t> window;
  // Unset: 1 with a TurboQuant cache. Keeping the BOS token exact costs 2*head_dim floats per kv
  // head and layer; at head_dim 8 (stories260K) its key norm is large enough that even 8-bit
  // codes move its logit by ~1 and flip near-ties (docs/history/benchmarks-notebook.md,
  // "Engine (issue 5)").
  std::optional<size_t> sinks;
  std::string cache;                 // a name or string parse_kv_config reads; excludes the bits
  std::optional<std::string> exact;  // storage of sinks and window: f16 or f32
  // How attention multiplies TurboQuant codes (AttentionArithmetic): unset = int8 for the caches
  // built from bits (measured within 2% of the exact path's KL on kjv, several times cheaper;
  // docs/benchmarks.md), what the string says for `cache`.
  std::optional<std::string> attention;
};

// The cache `request` asks for; without any bits: `default_bits` TurboQuant bits (serve), or the
// dense fp16 cache when default_bits is empty (generate, Python). Bits 3.5 and 4 with a window
// name the measured schemes (tq3.5 / tq4). The exact regions of a TurboQuant cache are stored in
// fp16 unless `exact` says f32 (the schemes measured best so; generate, serve and Python used to
// differ here, issue 28). The front ends differ only in `default_bits`, so one request builds
// one cache everywhere. Throws turbokv::Error on a contradictory combination.
CacheConfig kv_request_config(const KvRequest& request, std::optional<double> default_bits);

struct KVConfigSpec {
  std::string name;         // as written
  std::string description;  // human-readable, e.g. "TurboQuant keys 3b mse, values 3b, window 64"
  CacheConfig config;       // what make_kv_cache builds
};

// The measured best scheme within a budget, for the budgets that have one: 3.5 (the name tq3.5)
// and 4 (tq4: within 4.25 bits/value everything counted); nullopt for other widths.
// `--kv-bits 3.5` / `--kv-bits 4` (generate, serve) take its code widths (keys, values, any
// layer_bits); their sinks and window stay the tools' own.
std::optional<CacheConfig> turboquant_scheme(double bits);

// Throws turbokv::Error naming the problem for an unknown or malformed name.
KVConfigSpec parse_kv_config(const std::string& name);
// Comma-separated list; empty items are skipped; throws on the first bad name.
std::vector<KVConfigSpec> parse_kv_config_list(const std::string& list);

// "" when the configuration fits (kv_heads, head_dim), else why it is not applicable.
std::string kv_config_problem(const KVConfigSpec& spec, int kv_heads, int head_dim);

// Builds the empty cache; NotApplicableError when kv_config_problem() is not empty.
std::unique_ptr<KVCache> make_kv_cache(const KVConfigSpec& spec, int kv_heads, int head_dim);
std::unique_ptr<KVCache> make_kv_cache(const std::string& name, int kv_heads, int head_dim);

// The maker of the baseline classes ("q8_0", "q4_0", "kivi", "affine") from a CacheConfig;
// CacheConfig.options keys: q8_0/q4_0: hadamard (0/1), rotation_seed; kivi: bits, group_size,
// residual; affine: bits, group_size. Unknown keys -> turbokv::Error. Listed in the registry.
std::unique_ptr<KVCache> make_baseline_cache(int kv_heads, int head_dim, const CacheConfig& config);

// Stored bits per cached value: 8 * nbytes() / (2 * size() * kv_heads * head_dim) (everything
// the cache holds, windows and scales included); 0 for an empty cache.
double kv_bits_per_value(const KVCache& cache);

}  // namespace turbokv
