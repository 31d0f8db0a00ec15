// The dense fast path (DenseKVCache pages read in place, blocked online softmax, split-K) must
// equal the dequantize-then-attend reference for every kernel table this CPU runs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "attention_test_util.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"

namespace {

using turbokv::AttentionOptions;
using turbokv::DenseDtype;
using turbokv::DenseKVCache;

using turbokv::test::random_normal;
using turbokv::test::rel_l2;
using TableGuard = turbokv::test::KernelTableGuard;

std::vector<const turbokv::attn::KernelTable*> tables() { return turbokv::test::all_kernel_tables(); }

// Fills a cache with n random tokens (keys scaled up so the softmax is not flat).
void fill(DenseKVCache& cache, size_t n, std::mt19937& rng) {
  const size_t count = static_cast<size_t>(cache.kv_heads()) * n * cache.head_dim();
  cache.append(random_normal(count, rng, 2.0f), random_normal(count, rng), n);
}

struct Case {
  DenseDtype dtype;
  int head_dim, q_heads, kv_heads;
  size_t tokens, page_tokens;
  int n_queries;
  AttentionOptions options;
};

void check_case(const Case& c, std::mt19937& rng) {
  DenseKVCache cache(c.kv_heads, c.head_dim, c.dtype, c.page_tokens);
  fill(cache, c.tokens, rng);
  const auto q = random_normal(static_cast<size_t>(c.q_heads) * c.n_queries * c.head_dim, rng);
  std::vector<float> expected(q.size()), got(q.size());
  turbokv::attend_dequantized(q, c.q_heads, c.n_queries, cache, expected, c.options);
  for (const auto* table : tables()) {
    TableGuard guard(table);
    std::fill(got.begin(), got.end(), -1.0f);
    turbokv::attend(q, c.q_heads, c.n_queries, cache, got, c.options);
    EXPECT_LT(rel_l2(got, expected), 1e-5)
        << table->name << " dtype " << int(c.dtype) << " dim " << c.head_dim << " heads "
        << c.q_heads << "/" << c.kv_heads << " tokens " << c.tokens << " page " << c.page_tokens
        << " queries " << c.n_queries << " threads " << c.options.threads;
  }
}

TEST(AttentionDense, MatchesReferenceAcrossShapes) {
  std::mt19937 rng(42);
  for (DenseDtype dtype : {DenseDtype::f16, DenseDtype::f32}) {
    for (int dim : {64, 80, 96, 128, 256, 13}) {
      for (int ratio : {1, 4, 8}) {
        for (size_t tokens : {size_t{1}, size_t{63}, size_t{301}}) {
          Case c{dtype, dim, 2 * ratio, 2, tokens, 100, 1, {}};
          check_case(c, rng);
        }
      }
    }
  }
}

TEST(AttentionDense, ChunkedCausalPrefillAndOptions) {
  std::mt19937 rng(7);
  for (int n_queries : {2, 5, 17}) {
    for (int threads : {1, 2}) {
      AttentionOptions options;
      options.threads = threads;
      check_case({DenseDtype::f16, 64, 12, 3, 90, 32, n_queries, options}, rng);
      options.softcap = 3.0f;
      options.scale = 0.3f;
      check_case({DenseDtype::f32, 96, 8, 2, 130, 256, n_queries, options}, rng);
      options.causal = false;
      check_case({DenseDtype::f16, 128, 8, 1, 77, 64, n_queries, options}, rng);
    }
  }
}

TEST(AttentionDense, SplitKOverLongContextMatches) {
  // One kv head and many tokens: the token range is split across tasks and merged.
  std::mt19937 rng(3);
  for (int threads : {1, 2, 3}) {
    AttentionOptions options;
    options.threads = threads;
    check_case({DenseDtype::f16, 128, 4, 1, 3000, 256, 1, options}, rng);
    check_case({DenseDtype::f16, 64, 1, 1, 2500, 128, 1, options}, rng);
  }
}

TEST(AttentionDense, PrefillChunkEqualsTokenByTokenDecode) {
  std::mt19937 rng(11);
  const int kv_heads = 2, q_heads = 8, dim = 64, chunk = 9;
  const size_t prefix = 70;
  DenseKVCache cache(kv_heads, dim, DenseDtype::f16, 64);
  fill(cache, prefix, rng);
  const auto k = random_normal(static_cast<size_t>(kv_heads) * chunk * dim, rng, 2.0f);
  const auto v = random_normal(k.size(), rng);
  const auto q = random_normal(static_cast<size_t>(q_heads) * chunk * dim, rng);
  // Token by token: append one token, attend its query.
  DenseKVCache step_cache(kv_heads, dim, DenseDtype::f16, 64);
  std::vector<float> prefix_k(static_cast<size_t>(kv_heads) * prefix * dim), prefix_v(prefix_k.size());
  cache.fetch(prefix_k, prefix_v);
  step_cache.append(prefix_k, prefix_v, prefix);
  const std::vector<float> decoded =
      turbokv::test::attend_token_by_token(step_cache, q, k, v, q_heads, kv_heads, chunk, dim);
  cache.append(k, v, chunk);
  std::vector<float> prefilled(q.size());
  turbokv::attend(q, q_heads, chunk, cache, prefilled);
  EXPECT_LT(rel_l2(prefilled, decoded), 1e-6);
}

// Prompt chunks run in prefill tiles (kPrefillRows rows, the tables' prefill_* kernels): GQA
// groups 1/4/8, head dims 64/128/256 and odd ones, chunks appended after an existing cache (the
// causal offset), odd token and query counts, a chunk of more rows than one tile, both dtypes.
TEST(AttentionDense, PrefillTilesMatchReference) {
  std::mt19937 rng(29);
  for (DenseDtype dtype : {DenseDtype::f16, DenseDtype::f32}) {
    for (int dim : {64, 128, 256, 13, 100}) {
      for (int ratio : {1, 4, 8}) {
        for (int n_queries : {2, 7, 41}) {
          for (size_t prefix : {size_t{0}, size_t{131}}) {
            AttentionOptions options;
            options.threads = 2;
            check_case({dtype, dim, 2 * ratio, 2, prefix + n_queries, 64, n_queries, options}, rng);
          }
        }
      }
    }
  }
}

// A prompt row's result does not depend on the chunk it is computed in (each row's scores and
// accumulators are its own chains of operations, and without split-K nothing is merged): the
// last rows of a 64-query chunk equal the same rows computed as a 32-query chunk, bit for bit.
// This is what keeps `generate` (chunks of 64) and the server (chunks of a page) identical.
TEST(AttentionDense, PrefillRowsDoNotDependOnTheChunk) {
  std::mt19937 rng(30);
  const int kv_heads = 8, q_heads = 32, dim = 64;
  DenseKVCache cache(kv_heads, dim, DenseDtype::f16, 32);
  fill(cache, 300, rng);
  for (const auto* table : tables()) {
    TableGuard guard(table);
    for (int threads : {1, 2}) {
      AttentionOptions options;
      options.threads = threads;
      const int big = 64, small = 32;
      const auto q = random_normal(static_cast<size_t>(q_heads) * big * dim, rng);
      std::vector<float> out_big(q.size());
      turbokv::attend(q, q_heads, big, cache, out_big, options);
      std::vector<float> q_small(static_cast<size_t>(q_heads) * small * dim), out_small(q_small.size());
      for (int h = 0; h < q_heads; ++h) {
        std::copy_n(q.begin() + (static_cast<size_t>(h) * big + (big - small)) * dim, small * dim,
                    q_small.begin() + static_cast<size_t>(h) * small * dim);
      }
      turbokv::attend(q_small, q_heads, small, cache, out_small, options);
      for (int h = 0; h < q_heads; ++h) {
        for (int i = 0; i < small * dim; ++i) {
          ASSERT_EQ(out_small[static_cast<size_t>(h) * small * dim + i],
                    out_big[(static_cast<size_t>(h) * big + (big - small)) * dim + i])
              << table->name << " threads " << threads << " head " << h;
        }
      }
    }
  }
}

TEST(AttentionDense, RejectsBadRequests) {
  DenseKVCache cache(2, 8);
  std::vector<float> q(4 * 8), out(4 * 8);
  EXPECT_THROW(turbokv::attend(q, 4, 1, cache, out), turbokv::Error);  // empty cache
  std::mt19937 rng(1);
  fill(cache, 3, rng);
  EXPECT_NO_THROW(turbokv::attend(q, 4, 1, cache, out));
  EXPECT_THROW(turbokv::attend(q, 3, 1, cache, out), turbokv::Error);  // GQA ratio
  std::vector<float> q4(4 * 4 * 8), out4(q4.size());
  EXPECT_THROW(turbokv::attend(q4, 4, 4, cache, out4), turbokv::Error);  // 4 causal queries, 3 tokens
  std::vector<float> short_out(10);
  EXPECT_THROW(turbokv::attend(q, 4, 1, cache, short_out), turbokv::Error);
}

}  // namespace
