#include "server/scheduling/kv_budget.hpp"

#include <algorithm>
#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>

#include "turbokv/dense_cache.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv::server {

size_t allocated_bytes(const KVCache& cache) {
  if (const auto* tq = dynamic_cast<const TurboQuantKVCache*>(&cache)) return tq->allocated_bytes();
  if (const auto* dense = dynamic_cast<const DenseKVCache*>(&cache)) return dense->allocated_bytes();
  return cache.nbytes();
}

size_t allocated_bytes(const PromptCache& cache) {
  size_t total = 0;
  for (size_t l = 0; l < cache.n_layers(); ++l) total += allocated_bytes(cache.layer(l));
  return total;
}

namespace {

// [n] -> the running maximum of what one cache of `config` allocates up to n tokens (a sliding
// layer's measured after each append, before it frees what its window left behind).
std::vector<size_t> measure_layer(const CacheConfig& config, int kv_heads, int head_dim, size_t max_tokens,
                                  size_t chunk, size_t window) {
  std::vector<size_t> per_layer(max_tokens + 1, 0);
  // Gaussian vectors: their norms fit every codec (the bytes do not depend on the values).
  SplitMix64 rng(7);
  const size_t row = static_cast<size_t>(kv_heads) * head_dim;
  std::vector<float> keys(row * chunk), values(row * chunk);
  for (auto& x : keys) x = static_cast<float>(rng.normal());
  for (auto& x : values) x = static_cast<float>(rng.normal());
  for (const size_t step : {size_t{1}, chunk}) {
    auto cache = make_kv_cache(kv_heads, head_dim, config);
    per_layer[0] = std::max(per_layer[0], allocated_bytes(*cache));
    size_t n = 0;
    while (n < max_tokens) {
      const size_t count = std::min(step, max_tokens - n);
      cache->append(std::span<const float>(keys.data(), row * count), std::span<const float>(values.data(), row * count),
                    count);
      const size_t bytes = allocated_bytes(*cache);
      for (size_t k = n + 1; k <= n + count; ++k) per_layer[k] = std::max(per_layer[k], bytes);
      n += count;
      if (window > 0) cache->drop_before(sliding_window_keep_from(n, window));
    }
  }
  for (size_t n = 1; n <= max_tokens; ++n) per_layer[n] = std::max(per_layer[n], per_layer[n - 1]);
  return per_layer;
}

}  // namespace

KvFootprint::KvFootprint(const CacheConfig& config, int n_layers, int kv_heads, int head_dim, size_t max_tokens,
                         size_t chunk, const std::vector<size_t>& layer_windows)
    : n_layers_(n_layers), kv_heads_(kv_heads), head_dim_(head_dim) {
  if (chunk == 0) throw Error("KvFootprint: chunk must be >= 1");
  if (!layer_windows.empty() && layer_windows.size() != static_cast<size_t>(n_layers)) {
    throw Error(fmt::format("KvFootprint: {} layer windows for {} layers", layer_windows.size(), n_layers));
  }
  total_.assign(max_tokens + 1, 0);
  // Layers with the same configuration (most of them) are measured once.
  std::map<std::pair<std::string, size_t>, int> layers_per_config;  // (configuration, window)
  std::map<std::string, CacheConfig> configs;
  for (int l = 0; l < n_layers; ++l) {
    const size_t window = layer_windows.empty() ? 0 : layer_windows[static_cast<size_t>(l)];
    const CacheConfig layer = layer_cache_config(config, l, n_layers, window);
    const std::string key = format_cache_config(layer);
    ++layers_per_config[{key, window}];
    configs.emplace(key, layer);
  }
  for (const auto& [key, count] : layers_per_config) {
    const std::vector<size_t> per_layer =
        measure_layer(configs.at(key.first), kv_heads, head_dim, max_tokens, chunk, key.second);
    for (size_t n = 0; n <= max_tokens; ++n) total_[n] += per_layer[n] * static_cast<size_t>(count);
  }
}

size_t KvFootprint::reservation(size_t n_tokens) const {
  if (n_tokens >= total_.size()) {
    throw Error(fmt::format("KvFootprint: {} tokens, measured up to {}", n_tokens, total_.size() - 1));
  }
  return total_[n_tokens];
}

size_t KvFootprint::fp16_bytes(size_t n_tokens) const {
  return n_tokens * static_cast<size_t>(n_layers_) * kv_heads_ * head_dim_ * 2 * 2;
}

}  // namespace turbokv::server
