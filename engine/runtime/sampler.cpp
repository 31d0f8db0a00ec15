#include "engine/runtime/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "turbokv/error.hpp"

namespace turbokv::engine {

int argmax(std::span<const float> logits) {
  if (logits.empty()) throw Error("argmax: empty logits");
  int best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int>(i);
  }
  return best;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  if (!(options_.temperature >= 0.0f) || !std::isfinite(options_.temperature)) {
    throw Error(fmt::format("sampler: temperature {} must be finite and >= 0", options_.temperature));
  }
  if (!(options_.top_p <= 1.0f) || std::isnan(options_.top_p)) {
    throw Error(fmt::format("sampler: top_p {} must be at most 1", options_.top_p));
  }
}

int Sampler::sample(std::span<const float> logits) {
  if (options_.temperature == 0.0f) return argmax(logits);
  if (logits.empty()) throw Error("sampler: empty logits");
  // Softmax of logits / temperature, in double for the normalizer.
  const float max_logit = logits[static_cast<size_t>(argmax(logits))];
  probs_.resize(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs_[i] = std::exp((logits[i] - max_logit) / options_.temperature);
    total += probs_[i];
  }
  const double r = rng_.uniform();
  const bool nucleus = options_.top_p > 0.0f && options_.top_p < 1.0f;
  if (!nucleus) {
    double cumulative = 0.0;
    for (size_t i = 0; i < probs_.size(); ++i) {
      cumulative += probs_[i];
      if (r * total < cumulative) return static_cast<int>(i);
    }
    return static_cast<int>(probs_.size() - 1);  // rounding
  }
  // Nucleus: tokens below (1 - top_p) / (n - 1) of the mass can never be in the set (the set's
  // smallest member is at least that large), so they are dropped before sorting.
  const double cutoff = (1.0 - options_.top_p) / static_cast<double>(probs_.size() - 1 + (probs_.size() == 1));
  candidates_.clear();
  for (size_t i = 0; i < probs_.size(); ++i) {
    if (probs_[i] / total >= cutoff) candidates_.emplace_back(probs_[i], static_cast<int>(i));
  }
  std::sort(candidates_.begin(), candidates_.end(),
            [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  double kept = 0.0;
  size_t last = candidates_.size() - 1;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    kept += candidates_[i].first;
    if (kept / total > options_.top_p) {
      last = i;
      break;
    }
  }
  double cumulative = 0.0;
  for (size_t i = 0; i <= last; ++i) {
    cumulative += candidates_[i].first;
    if (r * kept < cumulative) return candidates_[i].second;
  }
  return candidates_[last].second;
}

}  // namespace turbokv::engine
