// The reference attention is the oracle for every kernel, so it is checked against facts that
// follow from the definition rather than against another implementation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"

using turbokv::attend_reference;

TEST(AttentionReference, ZeroQueryAveragesVisibleValues) {
  const int kv_heads = 1, head_dim = 4, q_heads = 2;
  const size_t n = 5;
  std::vector<float> keys(n * head_dim), values(n * head_dim);
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  for (auto& x : keys) x = g(rng);
  for (auto& x : values) x = g(rng);
  // Two queries (the cache's last two positions), all zero: uniform weights over what each sees.
  std::vector<float> q(q_heads * 2 * head_dim, 0.0f), out(q.size());
  attend_reference(q, q_heads, 2, keys, values, kv_heads, n, head_dim, out);
  for (int h = 0; h < q_heads; ++h) {
    for (int qi = 0; qi < 2; ++qi) {
      const size_t visible = n - 2 + qi + 1;
      for (int j = 0; j < head_dim; ++j) {
        double mean = 0;
        for (size_t t = 0; t < visible; ++t) mean += values[t * head_dim + j];
        mean /= double(visible);
        EXPECT_NEAR(out[(h * 2 + qi) * head_dim + j], mean, 1e-6);
      }
    }
  }
}

TEST(AttentionReference, SharpQuerySelectsMatchingKey) {
  const int head_dim = 3;
  const size_t n = 3;
  // Orthogonal keys; a large query along key 1 puts (almost) all weight on value 1.
  std::vector<float> keys = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> q = {0, 100, 0}, out(3);
  turbokv::AttentionOptions opts;
  opts.causal = false;
  attend_reference(q, 1, 1, keys, values, 1, n, head_dim, out, opts);
  EXPECT_NEAR(out[0], 4, 1e-4);
  EXPECT_NEAR(out[1], 5, 1e-4);
  EXPECT_NEAR(out[2], 6, 1e-4);
}

TEST(AttentionReference, RejectsMismatchedShapes) {
  std::vector<float> keys(8), values(8), q(4), out(4);
  EXPECT_THROW(attend_reference(q, 3, 1, keys, values, 2, 1, 4, out), turbokv::Error);
  EXPECT_THROW(attend_reference(q, 1, 1, keys, values, 1, 3, 4, out), turbokv::Error);
}
