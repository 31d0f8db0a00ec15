// The feed-forward of a mixture-of-experts layer (qwen3moe), as llama.cpp's build_moe_ffn computes
// it for that architecture (softmax gating, the chosen weights renormalised, SiLU experts, no
// shared expert). Per row h of the step, with E experts of which k are used:
//   logits = h Wrouter^T                                   [E]
//   chosen = the k largest logits, largest first; equal logits: the lower expert index first
//   weight_i = softmax(logits)_i / sum_{j chosen} softmax(logits)_j
//            = exp(l_i - l_max) / sum_{j chosen} exp(l_j - l_max)    (the full sum cancels)
//   y = sum over chosen i, in that order, of weight_i * (silu(h Wgate_i^T) * (h Wup_i^T)) Wdown_i^T
//
// Batched: the step's rows are grouped by expert, and each chosen expert multiplies all the rows
// that chose it at once, so its three matrices are read once per step, not once per row.
//
// Batch invariance (WeightProducts::row_by_row, the server): a row's logits, and each expert's
// output for it, come from matmul_rowwise, bit for bit what matvec gives the row alone whatever
// other rows share the product; its routing reads only its own logits; its k outputs are summed
// in its own rank order. So a row's result does not depend on the other rows in the step.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/weight_products.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

// The routing of one row: chosen[k] = the experts of the k largest of logits[n_experts] (largest
// first, equal logits in expert order), weights[k] their renormalised softmax weights (summing to
// 1). Throws turbokv::Error unless 1 <= k <= n_experts.
void route_experts(const float* logits, int n_experts, int k, int* chosen, float* weights);

class ExpertStep {
 public:
  ExpertStep(const ModelConfig& config, WeightProducts products);

  // out[rows][dim] = the expert mixture of layer `w` applied to in[rows][dim]; out may be in.
  void run(const LayerWeights& w, const float* in, size_t rows, float* out, turbokv::ThreadPool& pool);

 private:
  void reserve(size_t rows);
  void run_expert(const LayerWeights& w, int e, std::span<const size_t> slots, const float* in,
                  turbokv::ThreadPool& pool);

  int experts_, used_, dim_, hidden_;
  WeightProducts products_;
  size_t capacity_ = 0;
  std::vector<float> logits_;       // [rows][experts]
  std::vector<int> chosen_;         // [rows][used]
  std::vector<float> weights_;      // [rows][used]
  std::vector<size_t> by_expert_;   // the (row * used + rank) slots, grouped by expert, rows ascending
  std::vector<size_t> first_;       // [experts + 1]: expert e's slots are by_expert_[first_[e] .. first_[e + 1])
  std::vector<float> gathered_;     // [rows][dim]: the rows one expert takes
  std::vector<float> gate_, up_;    // [rows][hidden]
  std::vector<float> expert_out_;   // [rows][dim]
  std::vector<float> slot_out_;     // [rows][used][dim]: each chosen expert's output for each row
};

}  // namespace turbokv::engine
