// turbokv::attend(): validates the request, then picks the fastest path for the cache class.
// Classes without a path here fall back to their own KVCache::attend() (by default
// dequantize-then-attend).
#include "attention/attention_paths.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {

void attend(std::span<const float> queries, int n_q_heads, int n_queries, const KVCache& cache,
            std::span<float> out, const AttentionOptions& options) {
  const AttentionRequest request{queries, n_q_heads, n_queries, out, options};
  validate_attention_request(request, cache);
  if (const auto* dense = dynamic_cast<const DenseKVCache*>(&cache)) {
    attn::attend_dense(request, *dense);
    return;
  }
  if (const auto* turboquant = dynamic_cast<const TurboQuantKVCache*>(&cache)) {
    attn::attend_turboquant(request, *turboquant);
    return;
  }
  cache.attend(request);
}

}  // namespace turbokv
