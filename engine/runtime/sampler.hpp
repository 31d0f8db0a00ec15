// Sampler: the next token from logits. Temperature 0 is greedy (argmax, lowest id on ties);
// otherwise softmax(logits / temperature), restricted to the smallest set of most likely
// tokens whose probability reaches top_p (nucleus sampling) when 0 < top_p < 1.
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
};

class Sampler {
 public:
  // Throws turbokv::Error on a negative or non-finite temperature or top_p > 1.
  explicit Sampler(const SamplerOptions& options);

  int sample(std::span<const float> logits);
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  turbokv::SplitMix64 rng_;
  std::vector<float> probs_;
  std::vector<std::pair<float, int>> candidates_;
};

// Index of the largest logit (the first one on ties).
int argmax(std::span<const float> logits);

}  // namespace turbokv::engine
