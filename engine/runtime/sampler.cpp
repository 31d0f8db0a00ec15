#include "engine/runtime/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

double log_sum_exp(std::span<const float> x) {
  double m = -std::numeric_limits<double>::infinity();
  for (const float v : x) m = std::max(m, static_cast<double>(v));
  double s = 0.0;
  for (const float v : x) s += std::exp(static_cast<double>(v) - m);
  return m + std::log(s);
}

TokenLogprob token_logprob(std::span<const float> logits, int token, int top) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) {
    throw Error(fmt::format("token_logprob: token {} outside {} logits", token, logits.size()));
  }
  const double lse = log_sum_exp(logits);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - lse);
  const size_t k = std::min(logits.size(), static_cast<size_t>(std::max(top, 0)));
  if (k == 0) return out;
  // One pass keeping the k best (k <= 20 in practice), descending: a vocabulary of 128k costs
  // no allocation or sort per scored position. An equal logit goes after those already kept,
  // so ties keep the lower id first.
  out.top.reserve(k + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (out.top.size() == k && !(l > out.top.back().second)) continue;
    const auto at = std::find_if(out.top.begin(), out.top.end(), [&](const auto& kept) { return l > kept.second; });
    out.top.insert(at, {static_cast<int>(i), l});
    if (out.top.size() > k) out.top.pop_back();
  }
  for (auto& [id, value] : out.top) value = static_cast<float>(static_cast<double>(value) - lse);
  return out;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  if (!(options_.temperature >= 0.0f) || !std::isfinite(options_.temperature)) {
    throw Error(fmt::format("sampler: temperature {} must be finite and >= 0", options_.temperature));
  }
  if (!(options_.top_p <= 1.0f) || std::isnan(options_.top_p)) {
    throw Error(fmt::format("sampler: top_p {} must be at most 1", options_.top_p));
  }
  if (!std::isfinite(options_.frequency_penalty) || !std::isfinite(options_.presence_penalty)) {
    throw Error("sampler: penalties must be finite");
  }
  for (const auto& [id, bias] : options_.logit_bias) {
    if (id < 0 || !std::isfinite(bias)) throw Error(fmt::format("sampler: bad logit_bias {} for token {}", bias, id));
  }
}

bool Sampler::adjusts() const {
  return options_.frequency_penalty != 0.0f || options_.presence_penalty != 0.0f || !options_.logit_bias.empty();
}

std::span<const float> Sampler::adjusted(std::span<const float> logits) {
  if (!adjusts()) return logits;
  adjusted_.assign(logits.begin(), logits.end());
  for (const auto& [id, bias] : options_.logit_bias) {
    if (static_cast<size_t>(id) >= adjusted_.size()) {
      throw Error(fmt::format("sampler: logit_bias token {} outside {} logits", id, adjusted_.size()));
    }
    adjusted_[static_cast<size_t>(id)] += bias;
  }
  for (size_t t = 0; t < std::min(counts_.size(), adjusted_.size()); ++t) {
    if (counts_[t] == 0) continue;
    adjusted_[t] -= options_.frequency_penalty * static_cast<float>(counts_[t]) + options_.presence_penalty;
  }
  return adjusted_;
}

int Sampler::sample(std::span<const float> raw_logits) {
  if (raw_logits.empty()) throw Error("sampler: empty logits");
  const std::span<const float> logits = adjusted(raw_logits);
  const int token = choose(logits);
  // Counts feed only the penalties; without them nothing needs them.
  if (adjusts()) {
    if (counts_.size() < raw_logits.size()) counts_.resize(raw_logits.size());
    ++counts_[static_cast<size_t>(token)];
  }
  return token;
}

int Sampler::choose(std::span<const float> logits) {
  if (options_.temperature == 0.0f) return argmax(logits);
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
