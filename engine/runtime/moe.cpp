#include "engine/runtime/moe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "engine/runtime/forward_ops.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

void route_experts(const float* logits, int n_experts, int k, int* chosen, float* weights) {
  if (n_experts < 1 || k < 1 || k > n_experts) {
    throw Error(fmt::format("route_experts: {} of {} experts", k, n_experts));
  }
  // k passes of selection rather than a sort, whose comparator a NaN logit would break: here a NaN
  // ranks below every number, and the choice stays deterministic.
  const auto above = [logits](int a, int b) {
    if (std::isnan(logits[a])) return false;
    return std::isnan(logits[b]) || logits[a] > logits[b];  // strict: an equal logit keeps the lower index
  };
  for (int r = 0; r < k; ++r) {
    int best = -1;
    for (int e = 0; e < n_experts; ++e) {
      if (std::find(chosen, chosen + r, e) != chosen + r) continue;
      if (best < 0 || above(e, best)) best = e;
    }
    chosen[r] = best;
  }
  const double top = logits[chosen[0]];
  double total = 0;
  for (int r = 0; r < k; ++r) total += std::exp(static_cast<double>(logits[chosen[r]]) - top);
  for (int r = 0; r < k; ++r) {
    weights[r] = static_cast<float>(std::exp(static_cast<double>(logits[chosen[r]]) - top) / total);
  }
}

ExpertStep::ExpertStep(const ModelConfig& config, WeightProducts products)
    : experts_(config.n_experts), used_(config.n_experts_used), dim_(config.dim), hidden_(config.hidden_dim),
      products_(products) {}

void ExpertStep::reserve(size_t rows) {
  if (rows <= capacity_) return;
  const size_t e = static_cast<size_t>(experts_), k = static_cast<size_t>(used_);
  const size_t dim = static_cast<size_t>(dim_), hidden = static_cast<size_t>(hidden_);
  logits_.resize(rows * e);
  chosen_.resize(rows * k);
  weights_.resize(rows * k);
  by_expert_.resize(rows * k);
  first_.resize(e + 1);
  gathered_.resize(rows * dim);
  gate_.resize(rows * hidden);
  up_.resize(rows * hidden);
  expert_out_.resize(rows * dim);
  slot_out_.resize(rows * k * dim);
  capacity_ = rows;
}

void ExpertStep::run(const LayerWeights& w, const float* in, size_t rows, float* out, ThreadPool& pool) {
  if (experts_ < 1) throw Error("ExpertStep: the model has no experts");
  reserve(rows);
  const size_t e_count = static_cast<size_t>(experts_), k = static_cast<size_t>(used_), dim = static_cast<size_t>(dim_);
  multiply_rows(products_, w.router, in, rows, logits_.data(), pool);
  for (size_t r = 0; r < rows; ++r) {
    route_experts(logits_.data() + r * e_count, experts_, used_, chosen_.data() + r * k, weights_.data() + r * k);
  }
  // Group the slots by expert (a counting sort; rows stay ascending within an expert).
  std::fill(first_.begin(), first_.end(), 0);
  for (size_t s = 0; s < rows * k; ++s) ++first_[static_cast<size_t>(chosen_[s]) + 1];
  for (size_t e = 0; e < e_count; ++e) first_[e + 1] += first_[e];
  std::vector<size_t> next(first_.begin(), first_.end() - 1);
  for (size_t s = 0; s < rows * k; ++s) by_expert_[next[static_cast<size_t>(chosen_[s])]++] = s;

  for (int e = 0; e < experts_; ++e) {
    const size_t begin = first_[static_cast<size_t>(e)], end = first_[static_cast<size_t>(e) + 1];
    if (begin == end) continue;
    run_expert(w, e, std::span<const size_t>(by_expert_.data() + begin, end - begin), in, pool);
  }
  // Each row's weighted sum in its rank order (in is no longer read: out may be in).
  for (size_t r = 0; r < rows; ++r) {
    float* y = out + r * dim;
    for (size_t i = 0; i < dim; ++i) y[i] = weights_[r * k] * slot_out_[(r * k) * dim + i];
    for (size_t s = 1; s < k; ++s) {
      const float weight = weights_[r * k + s];
      const float* o = slot_out_.data() + (r * k + s) * dim;
      for (size_t i = 0; i < dim; ++i) y[i] += weight * o[i];
    }
  }
}

// Expert e over the rows of `slots` (each row * used + rank): gathers them, multiplies them by its
// gate, up and down matrices at once, and leaves each row's output in its slot of slot_out_.
void ExpertStep::run_expert(const LayerWeights& w, int e, std::span<const size_t> slots, const float* in,
                            ThreadPool& pool) {
  const size_t m = slots.size(), k = static_cast<size_t>(used_), dim = static_cast<size_t>(dim_);
  const size_t hidden = static_cast<size_t>(hidden_);
  for (size_t j = 0; j < m; ++j) {
    std::memcpy(gathered_.data() + j * dim, in + (slots[j] / k) * dim, dim * sizeof(float));
  }
  multiply_rows(products_, expert_block(w.w_gate, experts_, e), gathered_.data(), m, gate_.data(), pool);
  multiply_rows(products_, expert_block(w.w_up, experts_, e), gathered_.data(), m, up_.data(), pool);
  for (size_t i = 0; i < m * hidden; ++i) gate_[i] = ops::silu(gate_[i]) * up_[i];
  multiply_rows(products_, expert_block(w.w_down, experts_, e), gate_.data(), m, expert_out_.data(), pool);
  for (size_t j = 0; j < m; ++j) {
    std::memcpy(slot_out_.data() + slots[j] * dim, expert_out_.data() + j * dim, dim * sizeof(float));
  }
}

}  // namespace turbokv::engine
