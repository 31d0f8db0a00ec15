// Sampler: the next token from logits. Before choosing, the logits get the request's
// adjustments (OpenAI's semantics): logit_bias[t] is added, and
//   logit[t] -= frequency_penalty * count[t] + presence_penalty * (count[t] > 0)
// where count[t] is how often this sampler has already returned t (the generated tokens).
// Then temperature 0 is greedy (argmax, lowest id on ties); otherwise softmax(logits /
// temperature), restricted to the smallest set of most likely tokens whose probability reaches
// top_p (nucleus sampling) when 0 < top_p < 1.
// Random draws come from the project PRNG (SplitMix64), so a seed gives the same tokens on
// every platform.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "turbokv/prng.hpp"

namespace turbokv::engine {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 0.9f;        // 1 (or <= 0): sample from the whole distribution
  uint64_t seed = 42;
  float frequency_penalty = 0.0f;  // per earlier occurrence of the token
  float presence_penalty = 0.0f;   // once the token has occurred
  std::vector<std::pair<int, float>> logit_bias{};  // (token id, added to its logit)
};

class Sampler {
 public:
  // Throws turbokv::Error on a negative or non-finite temperature, top_p > 1, or a non-finite
  // penalty or bias.
  explicit Sampler(const SamplerOptions& options);

  // Throws turbokv::Error on empty logits or a logit_bias token outside them.
  int sample(std::span<const float> logits);
  // The logits the next sample() chooses from: `logits` with the bias and penalties applied.
  // Valid until the next call of either.
  std::span<const float> adjusted(std::span<const float> logits);
  const SamplerOptions& options() const { return options_; }

 private:
  bool adjusts() const;
  int choose(std::span<const float> logits);  // temperature / top_p on adjusted logits
  SamplerOptions options_;
  turbokv::SplitMix64 rng_;
  std::vector<int> counts_;  // per token id, tokens returned so far (sized on first use)
  std::vector<float> adjusted_;
  std::vector<float> probs_;
  std::vector<std::pair<float, int>> candidates_;
};

// Index of the largest logit (the first one on ties).
int argmax(std::span<const float> logits);

// log(sum(exp(x))) in double.
double log_sum_exp(std::span<const float> x);

// A token's log-probability under softmax(logits) (the model's distribution at temperature 1)
// and the `top` most likely tokens with theirs (most likely first, lower id first on ties).
struct TokenLogprob {
  int token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int, float>> top;
};
// Throws turbokv::Error on a token outside the logits.
TokenLogprob token_logprob(std::span<const float> logits, int token, int top);

}  // namespace turbokv::engine
