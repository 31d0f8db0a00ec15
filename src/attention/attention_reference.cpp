// The reference attention: plain loops, double accumulation. Every fused kernel is tested
// against it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "core/check.hpp"
#include "turbokv/attention.hpp"

namespace turbokv {

namespace {

float effective_scale(const AttentionOptions& options, int head_dim) {
  return options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace

void validate_attention_request(const AttentionRequest& request, const KVCache& cache) {
  const int kv_heads = cache.kv_heads();
  const int head_dim = cache.head_dim();
  TURBOKV_CHECK(cache.size() > 0, "attend: the cache is empty (append keys/values first)");
  TURBOKV_CHECK(request.n_q_heads > 0 && request.n_q_heads % kv_heads == 0,
                "attend: n_q_heads ({}) must be a positive multiple of the cache's kv_heads ({})",
                request.n_q_heads, kv_heads);
  TURBOKV_CHECK(request.n_queries > 0, "attend: n_queries must be positive, got {}",
                request.n_queries);
  TURBOKV_CHECK(static_cast<size_t>(request.n_queries) <= cache.size() || !request.options.causal,
                "attend: {} causal queries but the cache holds only {} tokens", request.n_queries,
                cache.size());
  const size_t expected =
      static_cast<size_t>(request.n_q_heads) * request.n_queries * static_cast<size_t>(head_dim);
  TURBOKV_CHECK(request.queries.size() == expected,
                "attend: queries hold {} floats, expected n_q_heads*n_queries*head_dim = {}",
                request.queries.size(), expected);
  TURBOKV_CHECK(request.out.size() == expected,
                "attend: out holds {} floats, expected n_q_heads*n_queries*head_dim = {}",
                request.out.size(), expected);
  TURBOKV_CHECK(request.options.scale >= 0.0f && std::isfinite(request.options.scale),
                "attend: scale must be finite and >= 0, got {}", request.options.scale);
  TURBOKV_CHECK(request.options.softcap >= 0.0f && std::isfinite(request.options.softcap),
                "attend: softcap must be finite and >= 0, got {}", request.options.softcap);
  TURBOKV_CHECK(request.options.window == 0 || request.options.causal,
                "attend: a sliding window ({} tokens) needs causal attention", request.options.window);
  if (cache.first_held() > 0) {
    const size_t first_query = cache.size() - static_cast<size_t>(request.n_queries);
    TURBOKV_CHECK(request.options.window > 0 &&
                      sliding_window_keep_from(first_query, request.options.window) >= cache.first_held(),
                  "attend: the cache no longer holds positions before {} (a sliding-window ring), but a query at "
                  "position {} with window {} would read them",
                  cache.first_held(), first_query, request.options.window);
  }
}

size_t sliding_window_keep_from(size_t next_query, size_t window) {
  if (window == 0 || next_query + 1 <= window) return 0;
  return (next_query + 1 - window) / attn::kBlockTokens * attn::kBlockTokens;
}

void attend_reference(std::span<const float> queries, int n_q_heads, int n_queries,
                      std::span<const float> keys, std::span<const float> values, int kv_heads,
                      size_t n_tokens, int head_dim, std::span<float> out,
                      const AttentionOptions& options) {
  TURBOKV_CHECK(kv_heads > 0 && head_dim > 0 && n_q_heads % kv_heads == 0,
                "attend_reference: bad shape (q_heads {}, kv_heads {}, head_dim {})", n_q_heads,
                kv_heads, head_dim);
  const size_t kv_size = static_cast<size_t>(kv_heads) * n_tokens * head_dim;
  TURBOKV_CHECK(keys.size() == kv_size && values.size() == kv_size,
                "attend_reference: keys/values hold {}/{} floats, expected {}", keys.size(),
                values.size(), kv_size);
  const size_t q_size = static_cast<size_t>(n_q_heads) * n_queries * head_dim;
  TURBOKV_CHECK(queries.size() == q_size && out.size() == q_size,
                "attend_reference: queries/out hold {}/{} floats, expected {}", queries.size(),
                out.size(), q_size);

  const double scale = effective_scale(options, head_dim);
  const int group = n_q_heads / kv_heads;
  std::vector<double> scores(n_tokens);
  std::vector<double> acc(head_dim);
  for (int h = 0; h < n_q_heads; ++h) {
    const int kvh = h / group;
    const float* k_head = keys.data() + static_cast<size_t>(kvh) * n_tokens * head_dim;
    const float* v_head = values.data() + static_cast<size_t>(kvh) * n_tokens * head_dim;
    for (int qi = 0; qi < n_queries; ++qi) {
      const float* q = queries.data() + (static_cast<size_t>(h) * n_queries + qi) * head_dim;
      // Query qi sits at position n_tokens - n_queries + qi and sees keys up to it.
      // With a window it sees only the last `window` of them.
      size_t visible = n_tokens;
      if (options.causal) visible = n_tokens - static_cast<size_t>(n_queries) + qi + 1;
      const size_t from = options.window > 0 && visible > options.window ? visible - options.window : 0;
      double max_score = -std::numeric_limits<double>::infinity();
      for (size_t t = from; t < visible; ++t) {
        double dot = 0.0;
        for (int j = 0; j < head_dim; ++j) dot += double(q[j]) * double(k_head[t * head_dim + j]);
        double s = dot * scale;
        if (options.softcap > 0.0f) s = options.softcap * std::tanh(s / options.softcap);
        scores[t] = s;
        max_score = std::max(max_score, s);
      }
      double denom = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t t = from; t < visible; ++t) {
        const double w = std::exp(scores[t] - max_score);
        denom += w;
        for (int j = 0; j < head_dim; ++j) acc[j] += w * double(v_head[t * head_dim + j]);
      }
      float* o = out.data() + (static_cast<size_t>(h) * n_queries + qi) * head_dim;
      for (int j = 0; j < head_dim; ++j) o[j] = static_cast<float>(acc[j] / denom);
    }
  }
}

void attend_dequantized(std::span<const float> queries, int n_q_heads, int n_queries,
                        const KVCache& cache, std::span<float> out,
                        const AttentionOptions& options) {
  validate_attention_request({queries, n_q_heads, n_queries, out, options}, cache);
  const size_t n = cache.size();
  const size_t kv_size = static_cast<size_t>(cache.kv_heads()) * n * cache.head_dim();
  std::vector<float> keys(kv_size), values(kv_size);
  cache.fetch(keys, values);
  attend_reference(queries, n_q_heads, n_queries, keys, values, cache.kv_heads(), n,
                   cache.head_dim(), out, options);
}

void KVCache::attend(const AttentionRequest& request) const {
  attend_dequantized(request.queries, request.n_q_heads, request.n_queries, *this, request.out,
                     request.options);
}

}  // namespace turbokv
