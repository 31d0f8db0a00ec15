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
  app.add_option("--kv-codec", a->codec, "key codec: mse or prod")->check(CLI::IsMember({"mse", "prod"}))->capture_default_str();
  app.add_option_function<size_t>("--kv-window", [a](size_t n) { a->window = n; },
                                  "newest tokens kept exact (default with TurboQuant: 32)");
  app.add_option_function<size_t>("--kv-sinks", [a](size_t n) { a->sinks = n; },
                                  "first tokens kept exact (default with TurboQuant: 1, the BOS token)");
  app.add_option_function<std::string>("--kv-exact", [a](const std::string& t) { a->exact = t; },
                                       "storage of the exact sinks and window: f16 or f32")
      ->check(CLI::IsMember({"f16", "f32"}));
  app.add_option_function<std::string>("--kv-attention", [a](const std::string& t) { a->attention = t; },
                                       "arithmetic of attention over TurboQuant codes: int8 (default) or exact "
                                       "(float centroids, as dequantize-then-attend)")
      ->check(CLI::IsMember({"int8", "exact"}));
  app.add_option("--cache", a->cache, "a cache name or string, as eval --kv takes them: tq4, tq3.5, k3v2s1w12-x16, q8_0, "
                 "dense, dense:dtype=f32, turboquant:bits=3,window=32");
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
