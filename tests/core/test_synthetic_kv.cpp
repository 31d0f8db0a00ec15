// Synthetic KV data: deterministic from its seed, and shaped like real keys/values (outlier
// channels at 10-20x, RoPE-rotated pairs, near-isotropic values, queries at a set logit spread).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "turbokv/error.hpp"
#include "turbokv/synthetic_kv.hpp"

using namespace turbokv;

namespace {

// RMS of each channel of one head over all tokens.
std::vector<double> channel_rms(const std::vector<float>& x, int head, size_t n, int d) {
  std::vector<double> rms(d, 0.0);
  for (size_t t = 0; t < n; ++t) {
    for (int c = 0; c < d; ++c) {
      const double v = x[(head * n + t) * d + c];
      rms[c] += v * v;
    }
  }
  for (double& r : rms) r = std::sqrt(r / static_cast<double>(n));
  return rms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST(SyntheticKV, DeterministicFromTheSeed) {
  SyntheticKVOptions o;
  o.n_tokens = 200;
  o.head_dim = 64;
  const SyntheticKV a = make_synthetic_kv(o), b = make_synthetic_kv(o);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.queries, b.queries);
  o.seed += 1;
  const SyntheticKV c = make_synthetic_kv(o);
  EXPECT_NE(a.keys, c.keys);
  EXPECT_EQ(a.keys.size(), static_cast<size_t>(o.kv_heads) * 200 * 64);
  EXPECT_EQ(a.queries.size(), static_cast<size_t>(o.q_heads) * o.n_queries * 64);
}

TEST(SyntheticKV, KeysHaveOutlierChannelsValuesDoNot) {
  for (int d : {64, 128, 256}) {
    SyntheticKVOptions o;
    o.head_dim = d;
    o.n_tokens = 512;
    o.kv_heads = 2;
    o.q_heads = 4;
    const SyntheticKV s = make_synthetic_kv(o);
    for (int h = 0; h < o.kv_heads; ++h) {
      const auto k_rms = channel_rms(s.keys, h, s.n_tokens, d);
      const auto v_rms = channel_rms(s.values, h, s.n_tokens, d);
      const double typical = median(k_rms);
      ASSERT_EQ(s.outlier_channels[h].size(), static_cast<size_t>(2 * std::max(1, d / 64)));
      for (int c : s.outlier_channels[h]) {
        // Outlier pairs share their magnitude between the two channels as RoPE mixes them;
        // each channel alone carries a good part of the 10-20x.
        EXPECT_GT(k_rms[c] / typical, 5.0) << d << " " << c;
        EXPECT_LT(k_rms[c] / typical, 25.0) << d << " " << c;
      }
      // Outlier pairs' combined magnitude is 10-20x typical.
      const int half = d / 2;
      for (int c : s.outlier_channels[h]) {
        if (c >= half) continue;
        const double pair = std::sqrt(k_rms[c] * k_rms[c] + k_rms[c + half] * k_rms[c + half]);
        EXPECT_GT(pair / (std::sqrt(2.0) * typical), 8.0);
        EXPECT_LT(pair / (std::sqrt(2.0) * typical), 24.0);
      }
      const double v_max = *std::max_element(v_rms.begin(), v_rms.end());
      EXPECT_LT(v_max / median(v_rms), 3.0) << "values should be near isotropic";
    }
  }
}

TEST(SyntheticKV, KeysAreRopeRotatedPairs) {
  SyntheticKVOptions o;
  o.head_dim = 64;
  o.kv_heads = 1;
  o.q_heads = 1;
  o.n_tokens = 2048;
  const SyntheticKV s = make_synthetic_kv(o);
  const int d = 64, half = 32;
  // Pair 0 turns by 1 radian per token: un-rotating it by -t recovers a fixed mean direction
  // (the shared key mean), while the raw channel averages out over positions.
  double raw[2] = {0, 0}, unrot[2] = {0, 0}, rms = 0;
  for (size_t t = 0; t < s.n_tokens; ++t) {
    const double a = s.keys[t * d], b = s.keys[t * d + half];
    const double c = std::cos(static_cast<double>(t)), sn = std::sin(static_cast<double>(t));
    raw[0] += a;
    raw[1] += b;
    unrot[0] += a * c + b * sn;
    unrot[1] += -a * sn + b * c;
    rms += a * a + b * b;
  }
  const double n = static_cast<double>(s.n_tokens);
  rms = std::sqrt(rms / n);
  const double raw_mean = std::hypot(raw[0], raw[1]) / n;
  const double unrot_mean = std::hypot(unrot[0], unrot[1]) / n;
  EXPECT_LT(raw_mean, 0.1 * rms);
  EXPECT_GT(unrot_mean, 5 * raw_mean);
  EXPECT_GT(unrot_mean, 0.2 * rms);
}

TEST(SyntheticKV, QueryLogitsHaveTheRequestedSpread) {
  SyntheticKVOptions o;
  o.head_dim = 128;
  o.n_tokens = 300;
  o.kv_heads = 2;
  o.q_heads = 6;
  o.n_queries = 3;
  o.query_logit_std = 2.5;
  const SyntheticKV s = make_synthetic_kv(o);
  const int d = 128, group = 3;
  for (int qh = 0; qh < o.q_heads; ++qh) {
    for (int qi = 0; qi < o.n_queries; ++qi) {
      const float* q = s.queries.data() + (qh * o.n_queries + qi) * d;
      double sum = 0, sum2 = 0;
      for (size_t t = 0; t < s.n_tokens; ++t) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += double(q[c]) * s.keys[((qh / group) * s.n_tokens + t) * d + c];
        dot /= std::sqrt(128.0);
        sum += dot;
        sum2 += dot * dot;
      }
      const double mean = sum / 300, sd = std::sqrt(sum2 / 300 - mean * mean);
      EXPECT_NEAR(sd, 2.5, 2.5e-3);
    }
  }
}

TEST(SyntheticKV, RejectsBadOptions) {
  SyntheticKVOptions o;
  o.head_dim = 63;
  EXPECT_THROW(make_synthetic_kv(o), Error);
  o = {};
  o.q_heads = 6;  // not a multiple of 4
  EXPECT_THROW(make_synthetic_kv(o), Error);
  o = {};
  o.n_tokens = 0;
  EXPECT_THROW(make_synthetic_kv(o), Error);
  o = {};
  o.outlier_min = -1;
  EXPECT_THROW(make_synthetic_kv(o), Error);
}
