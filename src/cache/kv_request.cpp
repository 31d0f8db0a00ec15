// kv_request_config: the KV-cache request of every front end (CLI flags, server, Python) -> a
// CacheConfig, in one place (include/turbokv/cache_config.hpp).
#include <fmt/format.h>

#include "turbokv/cache_config.hpp"
#include "turbokv/error.hpp"

namespace turbokv {

CacheConfig kv_request_config(const KvRequest& a, std::optional<double> default_bits) {
  const bool any_bits = a.kv_bits || a.key_bits || a.value_bits;
  if (!a.cache.empty()) {
    if (any_bits) throw Error("a cache string (--cache, cache=) cannot be combined with bits (--kv-bits/--key-bits/--value-bits, kv_bits=...)");
    if (a.window || a.sinks || a.exact) {
      throw Error("a cache string (--cache, cache=) takes window=, sinks= and exact= inside it, not as --kv-window/--kv-sinks/--kv-exact or kv_window=/kv_sinks=");
    }
    CacheConfig config = parse_kv_config(a.cache).config;  // a short name (tq4) or a kind:key=value string
    if (a.attention) config.tq.int8_attention = *a.attention == "int8";
    return config;
  }
  CacheConfig config;
  if (!any_bits && !default_bits) {
    if (a.window || a.sinks || a.exact || a.attention) {
      throw Error("a window, sinks, exact storage or attention arithmetic need bits (--kv-bits, kv_bits=): the dense cache keeps everything");
    }
    return config;  // dense fp16
  }
  if (a.kv_bits && (a.key_bits || a.value_bits)) throw Error("give either --kv-bits (kv_bits=) or --key-bits with --value-bits (key_bits=, value_bits=)");
  if (!a.kv_bits && (a.key_bits || a.value_bits) && !(a.key_bits && a.value_bits)) {
    throw Error("key bits and value bits (--key-bits/--value-bits, key_bits=/value_bits=) go together");
  }
  const double bits = a.kv_bits ? *a.kv_bits : default_bits.value_or(4);
  config.kind = "turboquant";
  config.tq.key_bits = a.key_bits ? *a.key_bits : bits;
  config.tq.value_bits = a.value_bits ? *a.value_bits : bits;
  config.tq.key_codec = parse_codec_kind(a.codec);
  config.tq.window = a.window.value_or(32);
  config.tq.sinks = a.sinks.value_or(1);
  config.tq.exact_dtype = a.exact ? parse_dense_dtype(*a.exact) : DenseDtype::f16;
  config.tq.int8_attention = a.attention.value_or("int8") == "int8";
  // Bits 3.5 / 4 name the measured schemes (eval's tq3.5 / tq4): their code widths (and per-layer
  // widths, if any) and fp16 exact tokens unless `exact` says otherwise; how many sinks and window
  // tokens stay the request's (or the defaults). The schemes spend part of the budget on the
  // window: without one (window 0) the bits go to plain codes instead.
  if (a.kv_bits && config.tq.key_codec == TurboQuantCodecKind::mse && config.tq.window > 0) {
    if (const auto scheme = turboquant_scheme(*a.kv_bits)) {
      config.tq.key_bits = scheme->tq.key_bits;
      config.tq.value_bits = scheme->tq.value_bits;
      config.layer_bits = scheme->layer_bits;
      if (!a.exact) config.tq.exact_dtype = scheme->tq.exact_dtype;
    }
  }
  return config;
}

}  // namespace turbokv
