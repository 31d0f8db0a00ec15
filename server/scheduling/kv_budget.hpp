// KV memory accounting for the server: what a sequence's caches may allocate, measured once
// for the configured cache class, so admission can reserve exact bytes.
#pragma once

#include <cstddef>
#include <vector>

#include "turbokv/kv_cache.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::server {

// Bytes a cache has allocated: page memory with the unused tail of the last page, window and
// sink buffers with their spare capacity (allocated_bytes() of the built-in classes; nbytes()
// for other classes, which allocate what they hold).
size_t allocated_bytes(const KVCache& cache);
size_t allocated_bytes(const PromptCache& cache);

class KvFootprint {
 public:
  // Measures each distinct layer configuration of `config` (layer_cache_config: dense layers and
  // per-layer widths differ; kv_heads x head_dim) holding 0..max_tokens tokens, appended both
  // one token at a time and in page-aligned chunks of `chunk` tokens (the two ways the server
  // feeds a cache), and keeps the running maximum: reservation(n) is an upper bound of what the
  // n_layers caches allocate while growing to n tokens. layer_windows[l] > 0: layer l slides
  // over that many positions and, as the decoder does, frees the pages no later query sees after
  // each append (its bytes stop growing at about the window); empty or 0: it keeps every position.
  KvFootprint(const CacheConfig& config, int n_layers, int kv_heads, int head_dim, size_t max_tokens, size_t chunk,
              const std::vector<size_t>& layer_windows = {});

  size_t reservation(size_t n_tokens) const;  // n_tokens <= max_tokens
  size_t max_tokens() const { return total_.size() - 1; }
  // What an fp16 cache would hold for n tokens (for the capacity ratio in /metrics).
  size_t fp16_bytes(size_t n_tokens) const;

 private:
  int n_layers_;
  int kv_heads_;
  int head_dim_;
  std::vector<size_t> total_;  // [n] -> max allocated bytes of all layers up to n tokens
};

}  // namespace turbokv::server
