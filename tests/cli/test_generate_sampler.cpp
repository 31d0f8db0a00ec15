// Sampler: greedy is argmax (first on ties); temperature sampling follows softmax(logits / T)
// (checked by frequency); top-p never returns a token outside the nucleus; a seed fixes the
// sequence; bad options are refused. logit_bias and the OpenAI penalties change the logits as
// their formula says (checked against a scalar recomputation), and token_logprob is log-softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
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

// The penalties against their formula, recomputed here from the tokens the sampler returned:
// adjusted[t] = logit[t] + bias[t] - frequency * count[t] - presence * (count[t] > 0).
TEST(Sampler, PenaltiesAndBiasFollowOpenAIsFormula) {
  const std::vector<float> logits{2.0f, 1.5f, 1.0f, 0.5f, -1.0f};
  SamplerOptions o{0.0f, 1.0f, 5};
  o.frequency_penalty = 0.3f;
  o.presence_penalty = 0.25f;
  o.logit_bias = {{4, 3.0f}, {1, -0.2f}};
  Sampler s(o);
  std::map<int, int> count;
  for (int step = 0; step < 12; ++step) {
    const std::vector<float> adjusted(s.adjusted(logits).begin(), s.adjusted(logits).end());
    for (size_t t = 0; t < logits.size(); ++t) {
      double want = logits[t];
      for (const auto& [id, bias] : o.logit_bias) want += id == static_cast<int>(t) ? bias : 0.0;
      const int c = count[static_cast<int>(t)];
      want -= o.frequency_penalty * c + (c > 0 ? o.presence_penalty : 0.0);
      EXPECT_NEAR(adjusted[t], want, 1e-5) << "step " << step << " token " << t;
    }
    const int token = s.sample(logits);
    // Greedy picks the adjusted argmax, so the penalties make it move on from a repeated token.
    EXPECT_EQ(token, argmax(adjusted)) << "step " << step;
    ++count[token];
  }
  // Tokens 0 and 4 (biased up to 2.0) tie first; then the penalties spread the choices.
  EXPECT_GE(count.size(), 3u);
  // Without options the logits pass unchanged (no copy, no counting).
  Sampler plain(SamplerOptions{0.0f, 1.0f, 5});
  EXPECT_EQ(plain.adjusted(logits).data(), logits.data());
}

TEST(Sampler, NegativePenaltiesFavourRepeats) {
  const std::vector<float> logits{1.0f, 0.9f};
  SamplerOptions o{0.0f, 1.0f, 5};
  o.frequency_penalty = -0.5f;
  Sampler s(o);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.sample(logits), 0);
  // A bias of -100 removes a token for all practical purposes, +100 forces it.
  SamplerOptions forced{1.0f, 1.0f, 9};
  forced.logit_bias = {{1, 100.0f}};
  Sampler f(forced);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(f.sample(logits), 1);
  SamplerOptions out_of_range{0.0f, 1.0f, 9};
  out_of_range.logit_bias = {{7, 1.0f}};
  Sampler bad(out_of_range);
  EXPECT_THROW(bad.sample(logits), turbokv::Error);
  SamplerOptions nan{0.0f, 1.0f, 9};
  nan.presence_penalty = NAN;
  EXPECT_THROW(Sampler{nan}, turbokv::Error);
}

TEST(Sampler, TokenLogprobIsLogSoftmaxWithTheTopAlternatives) {
  const std::vector<float> logits{0.5f, 3.0f, -2.0f, 3.0f, 1.0f};
  double z = 0;
  for (const float l : logits) z += std::exp(static_cast<double>(l));
  const TokenLogprob lp = token_logprob(logits, 4, 3);
  EXPECT_EQ(lp.token, 4);
  EXPECT_NEAR(lp.logprob, 1.0 - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // ties: the lower id first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 4);
  EXPECT_NEAR(lp.top[0].second, 3.0 - std::log(z), 1e-6);
  EXPECT_TRUE(token_logprob(logits, 0, 0).top.empty());
  EXPECT_EQ(token_logprob(logits, 0, 99).top.size(), logits.size());
  EXPECT_THROW(token_logprob(logits, 5, 1), turbokv::Error);
  double total = 0;
  for (const auto& [id, l] : token_logprob(logits, 0, 5).top) total += std::exp(l);
  EXPECT_NEAR(total, 1.0, 1e-6);
}
