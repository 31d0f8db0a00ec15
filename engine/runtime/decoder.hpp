// Decoder: the transformer of a Llama-family model (llama, qwen2, qwen3, qwen3moe, gemma2, gemma3,
// olmo2, granite, phi3) over a batch of rows, the one place its math is written. Forward (one
// sequence, a chunk of its tokens per step) and BatchForward (many sequences per step) both run
// it; one sequence is a batch of one run.
//
// A step is a list of runs, each some consecutive tokens of one sequence with that sequence's
// per-layer caches, their rows back to back. For every row, per layer:
//   h = RMSNorm(x);  q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
//   [Qwen3, Gemma 3: RMSNorm over each head of q and k];  RoPE(q, k) at the row's position
//   per run: cache.append(k, v);  a = attend(q, cache)     <- the KV cache API, any cache class
//   x += a Wo^T                                             [Gemma: x += RMSNorm(a Wo^T)]
//   h = RMSNorm(x);  x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T   [Gemma: gelu_tanh, post-norm;
//                                                                   qwen3moe: routed experts, moe.hpp]
// then logits = RMSNorm(x) Wout^T for the rows asked for [Gemma 2: soft-capped]. Every weight
// matrix is read once per step for all rows; attention runs per run over its own cache, runs in
// the order given (a later run of a sequence sees an earlier one's tokens).
//
// The other variations: Gemma scales the embedding by sqrt(dim), has its own q.k scale, and its
// sliding-window layers (config.layer_slides) attend only their window, with their own RoPE
// base in Gemma 3; Gemma 2 soft-caps its attention logits. OLMo 2 has post-norms but no
// pre-norms, and its q/k norms span the whole projections. Granite scales its embedding,
// residual adds, q.k and logits. Phi-3's fused tensors are split at load (model_gguf.cpp); its
// LongRoPE factors, magnitude and partial rotary are ops::Rope's (forward_ops.hpp).
//
// Each variation has one home in decoder.cpp: the norm (norm_rows; whether a block's input is
// normed at all: block_input), what is done to q and k before attention (bias, QK norm:
// finish_qk), the feed-forward kind (feed_forward), a norm on a block's output before its
// residual (layer), what attention sees and how it scales (attend_run), and scalings (of the
// embedding: embed; of the residual: add_residual; of the logits: logits).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/forward_ops.hpp"
#include "engine/runtime/moe.hpp"
#include "engine/runtime/weight_products.hpp"
#include "turbokv/kv_cache.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

// Some consecutive tokens of one sequence, at positions position .. position + tokens.size() - 1.
struct TokenRun {
  std::span<const int> tokens;
  std::span<turbokv::KVCache* const> caches;  // one per layer
  size_t position = 0;
};

class Decoder {
 public:
  // attention_threads: the thread count every attend() call gets (a fixed count keeps a run's
  // attention summation order independent of the rest of the step).
  Decoder(const Model& model, turbokv::ThreadPool& pool, WeightProducts products, int attention_threads);

  // Throws turbokv::Error, naming `who`, unless `tokens` is non-empty and inside the vocabulary
  // and `caches` has one cache per layer, each of the model's kv heads x head_dim and all holding
  // the same number of tokens.
  void check(std::span<const int> tokens, std::span<turbokv::KVCache* const> caches, std::string_view who) const;

  // Scratch for steps of up to `rows` rows (run() grows it when needed).
  void reserve(size_t rows);

  // Runs the runs' tokens through every layer, appending their keys and values to the runs'
  // caches; the final hidden states stay for logits(). Runs must have passed check().
  void run(std::span<const TokenRun> runs);

  // out[i][vocab] = the logits of row rows[i] of the last run() (rows numbered across its runs).
  void logits(std::span<const size_t> rows, float* out);

  const Model& model() const { return model_; }

 private:
  void embed(std::span<const TokenRun> runs);
  void layer(const LayerWeights& w, int l, std::span<const TokenRun> runs);
  void attention(const LayerWeights& w, int l, std::span<const TokenRun> runs);
  void finish_qk(const LayerWeights& w, const ops::Rope& rope, float* q, float* k, float* v, size_t position) const;
  void attend_run(const TokenRun& run, int l, size_t first_row);
  void feed_forward(const LayerWeights& w);
  void norm_rows(std::span<const float> weight, const float* in, size_t rows, float* out) const;
  void block_input(std::span<const float> weight);
  void add_residual();
  void project(const WeightMatrix& w, const float* in, size_t rows, float* out) const;

  const Model& model_;
  turbokv::ThreadPool& pool_;
  WeightProducts products_;
  int attention_threads_;
  ops::Rope rope_, rope_local_;  // rope_local_: sliding-window layers'
  size_t rows_ = 0, capacity_ = 0;
  // Scratch, [rows][width] row-major: x_ the residual stream, xb_ a block's input and output.
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_;
  // One run's q, k, v and attention output, [heads][tokens][head_dim] (the cache's layout).
  std::vector<float> q_heads_, k_heads_, v_heads_, att_heads_;
  ExpertStep experts_;  // the feed-forward of a mixture-of-experts model
};

}  // namespace turbokv::engine
