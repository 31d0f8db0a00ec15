// attend()'s options and request checks against references written here (not the library's
// attend_reference): a two-token closed form for scale, softcap and causality, and a plain
// double-precision loop over each cache's fetched keys/values for every class (with and
// without a sliding window); what
// validate_attention_request refuses; TurboQuantKVCache::allocated_bytes() from its layout.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "turbokv/attention.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// Softmax attention written out: logit = scale * q.k, then softcap * tanh(logit / softcap) when
// softcap > 0; query i of n sees the first size - n + 1 + i tokens when causal, and of those
// only the last `window` when window > 0. Layouts as in attention.hpp (q/out
// [q_heads][n_queries][d], keys/values [kv_heads][tokens][d]).
std::vector<double> plain_attention(const std::vector<float>& q, int q_heads, int n_queries,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    int kv_heads, size_t tokens, int d, double scale, double softcap,
                                    bool causal, size_t window = 0) {
  std::vector<double> out(q.size(), 0.0);
  for (int h = 0; h < q_heads; ++h) {
    const int kvh = h / (q_heads / kv_heads);
    for (int i = 0; i < n_queries; ++i) {
      const size_t seen = causal ? tokens - n_queries + 1 + i : tokens;
      const size_t from = window > 0 && seen > window ? seen - window : 0;
      std::vector<double> p(seen, 0.0);
      double total = 0;
      for (size_t t = from; t < seen; ++t) {
        double logit = 0;
        for (int j = 0; j < d; ++j) {
          logit += double(q[(size_t(h) * n_queries + i) * d + j]) * k[(size_t(kvh) * tokens + t) * d + j];
        }
        logit *= scale;
        if (softcap > 0) logit = softcap * std::tanh(logit / softcap);
        p[t] = std::exp(logit);  // small logits here: no max subtraction needed
        total += p[t];
      }
      for (size_t t = from; t < seen; ++t) {
        for (int j = 0; j < d; ++j) {
          out[(size_t(h) * n_queries + i) * d + j] += p[t] / total * v[(size_t(kvh) * tokens + t) * d + j];
        }
      }
    }
  }
  return out;
}

TEST(AttentionOptions, TwoTokenClosedForm) {
  // Keys e1, e2 and values e1, e2 (head_dim 2): the output is (s, 1 - s) with
  // s = 1 / (1 + exp(l2 - l1)), l_i the (scaled, capped) logits of q = (a, b): l1 = f(a), l2 = f(b).
  DenseKVCache cache(1, 2, DenseDtype::f32);
  const std::vector<float> kv = {1, 0, 0, 1};
  cache.append(kv, kv, 2);
  const float a = 3.0f, b = -1.0f;
  const std::vector<float> q = {a, b};
  struct Case {
    float scale, softcap;
    double l1, l2;
  };
  const double r2 = 1.0 / std::sqrt(2.0);
  const Case cases[] = {{0.0f, 0.0f, a * r2, b * r2},  // default scale 1/sqrt(head_dim)
                        {0.5f, 0.0f, 0.5 * a, 0.5 * b},
                        {2.0f, 1.5f, 1.5 * std::tanh(2.0 * a / 1.5), 1.5 * std::tanh(2.0 * b / 1.5)}};
  for (const Case& c : cases) {
    AttentionOptions o;
    o.scale = c.scale;
    o.softcap = c.softcap;
    std::vector<float> out(2);
    attend(q, 1, 1, cache, out, o);
    const double s = 1.0 / (1.0 + std::exp(c.l2 - c.l1));
    EXPECT_NEAR(out[0], s, 1e-6) << c.scale << " " << c.softcap;
    EXPECT_NEAR(out[1], 1.0 - s, 1e-6) << c.scale << " " << c.softcap;
  }
  // Two causal queries: the first sees only token 0 (output e1 exactly), the second both.
  std::vector<float> two_q = {a, b, a, b}, out2(4);
  attend(two_q, 1, 2, cache, out2);
  EXPECT_NEAR(out2[0], 1.0f, 1e-6);
  EXPECT_NEAR(out2[1], 0.0f, 1e-6);
  EXPECT_NEAR(out2[2], 1.0 / (1.0 + std::exp((b - a) * r2)), 1e-6);
  AttentionOptions all;
  all.causal = false;  // both queries see both tokens
  attend(two_q, 1, 2, cache, out2, all);
  EXPECT_NEAR(out2[0], out2[2], 1e-7);
}

TEST(AttentionOptions, EveryClassMatchesPlainAttentionOverItsOwnValues) {
  const int kv_heads = 2, q_heads = 4, d = 64, n_queries = 3;
  const size_t tokens = 37;
  const auto k = gaussian(kv_heads * tokens * d, 1, 1.5f), v = gaussian(kv_heads * tokens * d, 2);
  const auto q = gaussian(size_t(q_heads) * n_queries * d, 3);
  for (const char* name : {"dense32", "dense16", "tq4", "tq3s2w4", "prod3", "q8_0", "kivi2", "affine4"}) {
    auto cache = make_kv_cache(name, kv_heads, d);
    cache->append(k, v, tokens);
    std::vector<float> fk(k.size()), fv(v.size());
    cache->fetch(fk, fv);  // what the cache holds: attention must be exact over it
    for (const auto& [scale, softcap] : {std::pair{0.0f, 0.0f}, std::pair{0.2f, 2.0f}, std::pair{0.05f, 0.0f}}) {
      for (bool causal : {true, false}) {
        AttentionOptions o;
        o.scale = scale;
        o.softcap = softcap;
        o.causal = causal;
        std::vector<float> out(q.size());
        attend(q, q_heads, n_queries, *cache, out, o);
        const auto want = plain_attention(q, q_heads, n_queries, fk, fv, kv_heads, tokens, d,
                                          scale > 0 ? scale : 1.0 / std::sqrt(double(d)), softcap, causal);
        double worst = 0;
        for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - want[i]));
        EXPECT_LT(worst, 2e-5) << name << " scale " << scale << " softcap " << softcap << " causal " << causal;
      }
    }
  }
}

TEST(AttentionOptions, SlidingWindowMatchesPlainAttentionForEveryClass) {
  // 300 tokens (five blocks, so whole blocks fall before a window) and a chunk of 70 queries
  // (many tiles, rows whose windows start in different blocks); windows from one token (each
  // query sees only itself) to more than the cache; one and four threads (split-K ranges).
  const int kv_heads = 2, q_heads = 4, d = 64, n_queries = 70;
  const size_t tokens = 300;
  const auto k = gaussian(kv_heads * tokens * d, 6, 1.5f), v = gaussian(kv_heads * tokens * d, 7);
  const auto q = gaussian(size_t(q_heads) * n_queries * d, 8);
  for (const char* name : {"dense32", "dense16", "tq4", "tq3s2w4", "q8_0"}) {
    auto cache = make_kv_cache(name, kv_heads, d);
    cache->append(k, v, tokens);
    std::vector<float> fk(k.size()), fv(v.size());
    cache->fetch(fk, fv);
    for (const size_t window : {size_t{1}, size_t{5}, size_t{64}, size_t{100}, size_t{1000}}) {
      for (const float softcap : {0.0f, 2.0f}) {
        for (const int threads : {1, 4}) {
          AttentionOptions o;
          o.window = window;
          o.softcap = softcap;
          o.threads = threads;
          o.arithmetic = AttentionArithmetic::exact;
          std::vector<float> out(q.size());
          attend(q, q_heads, n_queries, *cache, out, o);
          const auto want = plain_attention(q, q_heads, n_queries, fk, fv, kv_heads, tokens, d,
                                            1.0 / std::sqrt(double(d)), softcap, true, window);
          double worst = 0;
          for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - want[i]));
          EXPECT_LT(worst, 2e-5) << name << " window " << window << " softcap " << softcap << " threads " << threads;
        }
      }
    }
  }
  // A one-token window returns each query's own value exactly.
  DenseKVCache cache(kv_heads, d, DenseDtype::f32);
  cache.append(k, v, tokens);
  AttentionOptions one;
  one.window = 1;
  std::vector<float> out(q.size());
  attend(q, q_heads, n_queries, cache, out, one);
  EXPECT_NEAR(out[5 * d + 3], v[(tokens - n_queries + 5) * d + 3], 1e-6);
}

TEST(AttentionOptions, ValidateRefusesBadRequests) {
  DenseKVCache cache(2, 8, DenseDtype::f32);
  const auto kv = gaussian(2 * 5 * 8, 4);
  cache.append(kv, kv, 5);
  const auto q = gaussian(4 * 2 * 8, 5);
  std::vector<float> out(q.size());
  AttentionRequest ok{q, 4, 2, out, {}};
  EXPECT_NO_THROW(validate_attention_request(ok, cache));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {-1.0f, nan, inf}) {
    AttentionRequest r = ok;
    r.options.scale = bad;
    EXPECT_THROW(validate_attention_request(r, cache), Error) << "scale " << bad;
    EXPECT_THROW(attend(q, 4, 2, cache, out, r.options), Error) << "scale " << bad;
    r = ok;
    r.options.softcap = bad;
    EXPECT_THROW(validate_attention_request(r, cache), Error) << "softcap " << bad;
  }
  for (int n_queries : {0, -1}) {
    AttentionRequest r = ok;
    r.n_queries = n_queries;
    EXPECT_THROW(validate_attention_request(r, cache), Error) << n_queries;
  }
  for (int q_heads : {0, -2, 3}) {
    AttentionRequest r = ok;
    r.n_q_heads = q_heads;
    EXPECT_THROW(validate_attention_request(r, cache), Error) << q_heads;
  }
  AttentionRequest many = ok;  // 6 causal queries over 5 tokens; fine when not causal
  std::vector<float> q6(4 * 6 * 8), out6(q6.size());
  many.queries = q6;
  many.out = out6;
  many.n_queries = 6;
  EXPECT_THROW(validate_attention_request(many, cache), Error);
  many.options.causal = false;
  EXPECT_NO_THROW(validate_attention_request(many, cache));
  many.options.window = 3;  // a sliding window is a causal mask
  EXPECT_THROW(validate_attention_request(many, cache), Error);
  AttentionRequest short_out = ok;
  short_out.out = std::span<float>(out.data(), out.size() - 1);
  EXPECT_THROW(validate_attention_request(short_out, cache), Error);
  DenseKVCache empty(2, 8, DenseDtype::f32);
  EXPECT_THROW(validate_attention_request(ok, empty), Error);
}

TEST(AllocatedBytes, TurboQuantPagesAndExactRegionsFromTheLayout) {
  const int H = 3, D = 64;
  const auto round64 = [](size_t b) { return (b + 63) / 64 * 64; };
  TurboQuantCacheOptions o;
  o.key_bits = 4;
  o.value_bits = 3;
  o.page_tokens = 20;
  o.sinks = 2;
  // Empty: only the sink buffers (allocated up front, keys and values, f32 then f16).
  TurboQuantKVCache empty(H, D, o);
  EXPECT_EQ(empty.allocated_bytes(), 2u * H * 2 * D * 4);
  o.exact_dtype = DenseDtype::f16;
  EXPECT_EQ(TurboQuantKVCache(H, D, o).allocated_bytes(), 2u * H * 2 * D * 2);
  o.exact_dtype = DenseDtype::f32;
  o.sinks = 0;
  // Compressed tokens: whole pages of page_tokens codes per head, each head's slab 64-byte aligned.
  TurboQuantKVCache c(H, D, o);
  EXPECT_EQ(c.allocated_bytes(), 0u);
  const auto x = gaussian(size_t(H) * 45 * D, 6);
  c.append(x, x, 45);
  const size_t page = H * (round64(20 * c.key_code_size()) + round64(20 * c.value_code_size()));
  EXPECT_EQ(c.num_pages(), 3u);
  EXPECT_EQ(c.allocated_bytes(), 3 * page);
  EXPECT_EQ(c.nbytes(), 45u * H * (c.key_code_size() + c.value_code_size()));
  EXPECT_GE(c.allocated_bytes(), c.nbytes());
  c.trim(25);  // 20 tokens: one page's worth, pages beyond it released
  EXPECT_LE(c.allocated_bytes(), 2 * page);
  EXPECT_GE(c.allocated_bytes(), c.nbytes());
}

}  // namespace
}  // namespace turbokv
