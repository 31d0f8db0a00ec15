#include "turbokv/prompt_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "cache/cache_state_util.hpp"
#include "core/check.hpp"

namespace turbokv {
namespace {

template <typename T>
T parse_number(const std::string& key, const std::string& value) {
  T out{};
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  TURBOKV_CHECK(ec == std::errc() && end == value.data() + value.size() && !value.empty(),
                "cache config: '{}' must be a number, got '{}'", key, value);
  return out;
}

bool parse_flag(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes") return true;
  if (value == "0" || value == "false" || value == "no") return false;
  detail::fail("cache config: '{}' must be 0/1 or true/false, got '{}'", key, value);
}

std::vector<int> parse_layers(const std::string& value) {
  std::vector<int> layers;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t end = std::min(value.find(';', start), value.size());
    const int layer = parse_number<int>("dense_layers", value.substr(start, end - start));
    TURBOKV_CHECK(layer >= 0, "cache config: dense_layers holds negative layer {}", layer);
    layers.push_back(layer);
    start = end + 1;
  }
  return layers;
}

// "0k4v4;-1k5v3.5" -> layer 0 keys 4 values 4, the last layer keys 5 values 3.5 (the eval
// names' k<A>v<B>; no ':' or ',', which separate configurations in a list).
std::vector<LayerBits> parse_layer_bits(const std::string& value) {
  std::vector<LayerBits> out;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t end = std::min(value.find(';', start), value.size());
    const std::string item = value.substr(start, end - start);
    const size_t k = item.find('k'), v = item.find('v');
    TURBOKV_CHECK(k != std::string::npos && v != std::string::npos && k < v,
                  "cache config: layer_bits entries are <layer>k<key bits>v<value bits>, got '{}'", item);
    LayerBits lb;
    lb.layer = parse_number<int>("layer_bits", item.substr(0, k));
    lb.key_bits = parse_number<double>("layer_bits", item.substr(k + 1, v - k - 1));
    lb.value_bits = parse_number<double>("layer_bits", item.substr(v + 1));
    for (const double b : {lb.key_bits, lb.value_bits}) {
      TURBOKV_CHECK(b >= 1 && b <= 8 && std::floor(b * 2) == b * 2,
                    "cache config: layer_bits widths must be in [1, 8] in steps of 0.5, got '{}'", item);
    }
    TURBOKV_CHECK(lb.layer >= -65536 && lb.layer < 65536, "cache config: layer_bits layer {} out of range", lb.layer);
    out.push_back(lb);
    start = end + 1;
  }
  return out;
}

}  // namespace

CacheConfig parse_cache_config(const std::string& spec) {
  CacheConfig config;
  const size_t colon = spec.find(':');
  config.kind = spec.substr(0, colon);
  TURBOKV_CHECK(!config.kind.empty(), "cache config: empty kind in '{}'", spec);
  if (colon == std::string::npos) return config;
  const std::string rest = spec.substr(colon + 1);
  size_t start = 0;
  while (start < rest.size()) {
    const size_t end = std::min(rest.find(',', start), rest.size());
    const std::string item = rest.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    TURBOKV_CHECK(eq != std::string::npos, "cache config: expected key=value, got '{}'", item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto& tq = config.tq;
    if (key == "dense_layers") {
      config.dense_layers = parse_layers(value);
    } else if (key == "sliding") {
      TURBOKV_CHECK(value == "auto" || value == "dense" || value == "same",
                    "cache config: sliding must be auto, dense or same (how sliding-window layers are stored), "
                    "got '{}'",
                    value);
      config.sliding = value;
    } else if (key == "layer_bits" && config.kind == "turboquant") {
      config.layer_bits = parse_layer_bits(value);
    } else if (key == "page_tokens") {
      const auto pt = parse_number<size_t>(key, value);
      config.dense_page_tokens = pt;
      tq.page_tokens = pt;
    } else if (config.kind == "dense" && key == "dtype") {
      config.dense_dtype = parse_dense_dtype(value);
    } else if (config.kind == "turboquant") {
      if (key == "bits") {
        tq.key_bits = tq.value_bits = parse_number<double>(key, value);
      } else if (key == "key_bits") {
        tq.key_bits = parse_number<double>(key, value);
      } else if (key == "value_bits") {
        tq.value_bits = parse_number<double>(key, value);
      } else if (key == "key_codec") {
        tq.key_codec = parse_codec_kind(value);
      } else if (key == "value_codec") {
        tq.value_codec = parse_codec_kind(value);
      } else if (key == "rotation") {
        tq.rotation = parse_rotation_kind(value);
      } else if (key == "seed") {
        tq.seed = parse_number<uint64_t>(key, value);
      } else if (key == "fp32_norm") {
        tq.fp32_norm = parse_flag(key, value);
      } else if (key == "norm_correction") {
        tq.norm_correction = parse_flag(key, value);
      } else if (key == "center") {
        tq.center = parse_flag(key, value);
      } else if (key == "window") {
        tq.window = parse_number<size_t>(key, value);
      } else if (key == "sinks") {
        tq.sinks = parse_number<size_t>(key, value);
      } else if (key == "exact") {
        tq.exact_dtype = parse_dense_dtype(value);
      } else if (key == "attention") {
        TURBOKV_CHECK(value == "int8" || value == "exact",
                      "cache config: attention must be int8 or exact, got '{}'", value);
        tq.int8_attention = value == "int8";
      } else {
        detail::fail("cache config: unknown turboquant option '{}'", key);
      }
    } else if (config.kind == "dense") {
      detail::fail("cache config: unknown dense option '{}'", key);
    } else {
      config.options[key] = value;
    }
  }
  return config;
}

std::string format_cache_config(const CacheConfig& c) {
  std::vector<std::string> items;
  if (c.kind == "dense") {
    items.push_back("dtype=" + dense_dtype_name(c.dense_dtype));
    items.push_back(fmt::format("page_tokens={}", c.dense_page_tokens));
  } else if (c.kind == "turboquant") {
    const auto& t = c.tq;
    items.push_back("key_bits=" + detail::format_double(t.key_bits));
    items.push_back("value_bits=" + detail::format_double(t.value_bits));
    items.push_back("key_codec=" + codec_kind_name(t.key_codec));
    items.push_back("value_codec=" + codec_kind_name(t.value_codec));
    items.push_back(std::string("rotation=") + rotation_kind_name(t.rotation));
    items.push_back(fmt::format("seed={}", t.seed));
    items.push_back(fmt::format("fp32_norm={}", t.fp32_norm ? 1 : 0));
    items.push_back(fmt::format("norm_correction={}", t.norm_correction ? 1 : 0));
    items.push_back(fmt::format("window={}", t.window));
    items.push_back(fmt::format("sinks={}", t.sinks));
    if (t.center) items.push_back("center=1");
    // Written even without exact tokens: an f16 cache rounds every input to fp16 before encoding
    // (TurboQuantCacheOptions), so its codes differ from an f32 one's.
    if (t.exact_dtype != DenseDtype::f32) items.push_back("exact=" + dense_dtype_name(t.exact_dtype));
    if (t.int8_attention) items.push_back("attention=int8");
    items.push_back(fmt::format("page_tokens={}", t.page_tokens));
  } else {
    for (const auto& [k, v] : c.options) items.push_back(k + "=" + v);
  }
  if (!c.dense_layers.empty()) {
    items.push_back(fmt::format("dense_layers={}", fmt::join(c.dense_layers, ";")));
  }
  if (c.sliding != "auto") items.push_back("sliding=" + c.sliding);
  if (!c.layer_bits.empty()) {
    std::vector<std::string> entries;
    for (const LayerBits& lb : c.layer_bits) {
      entries.push_back(fmt::format("{}k{}v{}", lb.layer, detail::format_double(lb.key_bits),
                                    detail::format_double(lb.value_bits)));
    }
    items.push_back(fmt::format("layer_bits={}", fmt::join(entries, ";")));
  }
  return items.empty() ? c.kind : c.kind + ":" + fmt::format("{}", fmt::join(items, ","));
}

CacheConfig layer_cache_config(const CacheConfig& config, int layer, int n_layers, size_t window) {
  TURBOKV_CHECK(layer >= 0 && layer < n_layers, "layer_cache_config: layer {} of {}", layer, n_layers);
  for (int l : config.dense_layers) {
    TURBOKV_CHECK(l < n_layers, "make_prompt_cache: dense layer {} but the model has {} layers", l, n_layers);
  }
  TURBOKV_CHECK(config.layer_bits.empty() || config.kind == "turboquant",
                "make_prompt_cache: layer_bits needs kind turboquant, got '{}'", config.kind);
  CacheConfig out = config;
  out.dense_layers.clear();
  out.layer_bits.clear();
  const bool sliding_dense =
      window > 0 && (config.sliding == "dense" || (config.sliding == "auto" && window <= kDenseRingMaxWindow));
  if (sliding_dense ||
      std::find(config.dense_layers.begin(), config.dense_layers.end(), layer) != config.dense_layers.end()) {
    out.kind = "dense";
    out.options.clear();
    return out;
  }
  for (const LayerBits& lb : config.layer_bits) {
    TURBOKV_CHECK(lb.layer < n_layers && lb.layer >= -n_layers,
                  "make_prompt_cache: layer_bits names layer {} but the model has {} layers", lb.layer, n_layers);
    if ((lb.layer >= 0 ? lb.layer : n_layers + lb.layer) == layer) {
      out.tq.key_bits = lb.key_bits;
      out.tq.value_bits = lb.value_bits;
    }
  }
  return out;
}

PromptCache make_prompt_cache(int n_layers, int kv_heads, int head_dim, const CacheConfig& config,
                              const std::vector<size_t>& layer_windows) {
  TURBOKV_CHECK(n_layers >= 0 && n_layers <= 65536,
                "make_prompt_cache: n_layers must be in [0, 65536], got {}", n_layers);
  TURBOKV_CHECK(layer_windows.empty() || layer_windows.size() == static_cast<size_t>(n_layers),
                "make_prompt_cache: {} layer windows for {} layers", layer_windows.size(), n_layers);
  PromptCache cache;
  // Every layer, dense ones included, from the one registry (make_kv_cache).
  for (int i = 0; i < n_layers; ++i) {
    const size_t window = layer_windows.empty() ? 0 : layer_windows[static_cast<size_t>(i)];
    cache.add_layer(make_kv_cache(kv_heads, head_dim, layer_cache_config(config, i, n_layers, window)));
  }
  return cache;
}

}  // namespace turbokv
