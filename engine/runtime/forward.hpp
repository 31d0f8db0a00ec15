// The forward pass of a Llama-family decoder (llama, qwen2, qwen3), one sequence at a time.
//
// Per layer, for a chunk of n tokens at positions p .. p+n-1 (p = the caches' size):
//   h = RMSNorm(x);  q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
//   [Qwen3: RMSNorm over each head of q and k];  RoPE(q, k) at their positions
//   cache.append(k, v, n);  a = attend(q, cache)   <- the KV cache API, any cache class
//   x += a Wo^T;  h = RMSNorm(x);  x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T
// then logits = RMSNorm(x) Wout^T. Prompts run in chunks through matmul (each weight row is
// read once per chunk); single decode steps use matvec. Both split rows over the pool.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/runtime/forward_ops.hpp"
#include "engine/model/model.hpp"
#include "turbokv/kv_cache.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

class Forward {
 public:
  // max_chunk: tokens per prefill step (scratch memory grows with it).
  Forward(const Model& model, turbokv::ThreadPool& pool, int max_chunk = 64);

  // Runs `tokens` through the model, appending their keys and values to caches[l] for each
  // layer l (all caches must hold the same number of tokens: the position of tokens[0]).
  // Returns the logits of the last token ([vocab_size]), valid until the next call.
  // Throws turbokv::Error on an out-of-range token id or a cache of the wrong shape.
  std::span<const float> run(std::span<const int> tokens, std::span<turbokv::KVCache* const> caches);

  // As run(), but writes every token's logits to all_logits ([tokens.size()][vocab_size]),
  // for teacher-forced evaluation.
  void run_all_logits(std::span<const int> tokens, std::span<turbokv::KVCache* const> caches,
                      std::span<float> all_logits);

  const Model& model() const { return model_; }
  turbokv::ThreadPool& pool() const { return pool_; }

 private:
  void check_caches(std::span<turbokv::KVCache* const> caches) const;
  // One chunk (n <= max_chunk_) at position pos; leaves the final hidden states in x_.
  void run_chunk(const int* tokens, int n, size_t pos, std::span<turbokv::KVCache* const> caches);
  // logits[n][vocab] for the first n rows of x_ (final norm + output projection).
  void compute_logits(int first_row, int n, float* logits);
  void project(const WeightMatrix& w, const float* in, int n, float* out) const;

  const Model& model_;
  turbokv::ThreadPool& pool_;
  int max_chunk_;
  ops::Rope rope_;
  // Scratch, [max_chunk][width] row-major unless noted.
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_;
  std::vector<float> q_heads_, k_heads_, v_heads_, att_heads_;  // [heads][max_chunk][head_dim]
  std::vector<float> logits_;
};

}  // namespace turbokv::engine
