// Sampler: greedy is argmax (first on ties); temperature sampling follows softmax(logits / T)
// (checked by frequency); top-p never returns a token outside the nucleus; a seed fixes the
// sequence; bad options are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/runtime/sampler.hpp"
#include "turbokv/error.hpp"

using namespace turbokv::engine;

TEST(Sampler, GreedyIsArgmaxFirstOnTies) {
  Sampler s(SamplerOptions{0.0f, 0.9f, 1});
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -2.0f, 3.0f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-5.0f}), 0);
  EXPECT_THROW(argmax(std::vector<float>{}), turbokv::Error);
}

TEST(Sampler, TemperatureFollowsSoftmax) {
  const std::vector<float> logits{0.0f, 1.0f, 2.0f, -1.0f};
  const float temperature = 0.7f;
  Sampler s(SamplerOptions{temperature, 1.0f, 7});
  std::vector<int> counts(logits.size());
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits))];
  double total = 0;
  for (const float l : logits) total += std::exp(l / temperature);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = std::exp(logits[i] / temperature) / total;
    const double sd = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(static_cast<double>(counts[i]) / n, p, 5 * sd + 1e-4) << i;
  }
}

TEST(Sampler, TopPStaysInTheNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps {0, 1} (0.5 < 0.7 <= 0.8).
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  Sampler s(SamplerOptions{1.0f, 0.7f, 3});
  std::vector<int> counts(4);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(logits))];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_NEAR(static_cast<double>(counts[0]) / n, 0.5 / 0.8, 0.02);
}

TEST(Sampler, SeedFixesTheSequence) {
  const std::vector<float> logits{0.3f, 0.2f, 0.1f, 0.0f, -0.1f};
  Sampler a(SamplerOptions{1.0f, 0.95f, 99}), b(SamplerOptions{1.0f, 0.95f, 99}), c(SamplerOptions{1.0f, 0.95f, 100});
  std::vector<int> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.sample(logits));
    sb.push_back(b.sample(logits));
    sc.push_back(c.sample(logits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler(SamplerOptions{-1.0f, 0.9f, 0}), turbokv::Error);
  EXPECT_THROW(Sampler(SamplerOptions{NAN, 0.9f, 0}), turbokv::Error);
  EXPECT_THROW(Sampler(SamplerOptions{1.0f, 1.5f, 0}), turbokv::Error);
}
