#include "tools/model/kv_flags.hpp"

#include <fmt/format.h>


#include "turbokv/cache_config.hpp"
#include "turbokv/error.hpp"

namespace turbokv::tools {

void add_kv_flags(CLI::App& app, const std::shared_ptr<KvFlags>& a, const std::string& default_text) {
  auto* kv_bits = app.add_option_function<double>("--kv-bits", [a](double b) { a->kv_bits = b; },
                                                    "TurboQuant bits for keys and values (default: " + default_text + ")");
  auto* key_bits = app.add_option_function<double>("--key-bits", [a](double b) { a->key_bits = b; }, "TurboQuant key bits");
  auto* value_bits = app.add_option_function<double>("--value-bits", [a](double b) { a->value_bits = b; },
                                                      "TurboQuant value bits");
  kv_bits->excludes(key_bits)->excludes(value_bits);
  app.add_option("--kv-codec", a->kv_codec, "key codec: mse or prod")->check(CLI::IsMember({"mse", "prod"}))->capture_default_str();
  app.add_option_function<size_t>("--kv-window", [a](size_t n) { a->kv_window = n; },
                                  "newest tokens kept exact (default with TurboQuant: 32)");
  app.add_option_function<size_t>("--kv-sinks", [a](size_t n) { a->kv_sinks = n; },
                                  "first tokens kept exact (default with TurboQuant: 1, the BOS token)");
  app.add_option_function<std::string>("--kv-exact", [a](const std::string& t) { a->kv_exact = t; },
                                       "storage of the exact sinks and window: f16 or f32")
      ->check(CLI::IsMember({"f16", "f32"}));
  app.add_option_function<std::string>("--kv-attention", [a](const std::string& t) { a->kv_attention = t; },
                                       "arithmetic of attention over TurboQuant codes: int8 (default) or exact "
                                       "(float centroids, as dequantize-then-attend)")
      ->check(CLI::IsMember({"int8", "exact"}));
  app.add_option("--cache", a->cache_spec, "any cache class, e.g. dense, dense:dtype=f32, turboquant:bits=3,window=32, q8_0");
}

CacheConfig kv_cache_config(const KvFlags& a, std::optional<double> default_bits, DenseDtype default_exact) {
  const bool any_bits = a.kv_bits || a.key_bits || a.value_bits;
  if (!a.cache_spec.empty()) {
    if (any_bits) throw Error("--cache cannot be combined with --kv-bits/--key-bits/--value-bits");
    if (a.kv_window || a.kv_sinks || a.kv_exact) {
      throw Error("--cache takes window=, sinks= and exact= inside its string, not --kv-window/--kv-sinks/--kv-exact");
    }
    CacheConfig config = parse_cache_config(a.cache_spec);
    if (a.kv_attention) config.tq.int8_attention = *a.kv_attention == "int8";
    return config;
  }
  CacheConfig config;
  if (!any_bits && !default_bits) {
    if (a.kv_window || a.kv_sinks || a.kv_exact || a.kv_attention) {
      throw Error("--kv-window/--kv-sinks/--kv-exact/--kv-attention need --kv-bits (the dense cache keeps everything)");
    }
    return config;  // dense fp16
  }
  if (a.kv_bits && (a.key_bits || a.value_bits)) throw Error("give either --kv-bits or --key-bits with --value-bits");
  if (!a.kv_bits && (a.key_bits || a.value_bits) && !(a.key_bits && a.value_bits)) {
    throw Error("--key-bits and --value-bits go together");
  }
  const double bits = a.kv_bits ? *a.kv_bits : default_bits.value_or(4);
  config.kind = "turboquant";
  config.tq.key_bits = a.key_bits ? *a.key_bits : bits;
  config.tq.value_bits = a.value_bits ? *a.value_bits : bits;
  config.tq.key_codec = parse_codec_kind(a.kv_codec);
  config.tq.window = a.kv_window.value_or(32);
  config.tq.sinks = a.kv_sinks.value_or(1);
  config.tq.exact_dtype = a.kv_exact ? parse_dense_dtype(*a.kv_exact) : default_exact;
  config.tq.int8_attention = a.kv_attention.value_or("int8") == "int8";
  // --kv-bits 3.5 / 4 name the measured schemes (eval's tq3.5 / tq4): their code widths (and
  // per-layer widths, if any) and fp16 exact tokens unless --kv-exact says otherwise; how many
  // sinks and window tokens stay this tool's (flags, defaults). The schemes spend part of the
  // budget on the window: without one (--kv-window 0) the bits go to plain codes instead.
  if (a.kv_bits && config.tq.key_codec == TurboQuantCodecKind::mse && config.tq.window > 0) {
    if (const auto scheme = turboquant_scheme(*a.kv_bits)) {
      config.tq.key_bits = scheme->tq.key_bits;
      config.tq.value_bits = scheme->tq.value_bits;
      config.layer_bits = scheme->layer_bits;
      if (!a.kv_exact) config.tq.exact_dtype = scheme->tq.exact_dtype;
    }
  }
  return config;
}

std::string kv_cache_label(const CacheConfig& config) {
  if (config.kind == "dense") return "dense " + dense_dtype_name(config.dense_dtype);
  if (config.kind != "turboquant") return format_cache_config(config);
  std::string label = fmt::format("turboquant k{}/v{} {}", config.tq.key_bits, config.tq.value_bits,
                                  codec_kind_name(config.tq.key_codec));
  for (const LayerBits& lb : config.layer_bits) label += fmt::format(", layer {} k{}/v{}", lb.layer, lb.key_bits, lb.value_bits);
  if (config.tq.sinks > 0) label += fmt::format(" sinks {}", config.tq.sinks);
  if (config.tq.window > 0) label += fmt::format(" window {}", config.tq.window);
  if ((config.tq.window > 0 || config.tq.sinks > 0) && config.tq.exact_dtype == DenseDtype::f16) label += " (fp16)";
  if (config.tq.int8_attention) label += ", int8 attention";
  return label;
}

}  // namespace turbokv::tools
