// Forward: one sequence through the model (what `generate`, `eval` and the Python binding run).
//
// The math is the Decoder's (decoder.hpp), run with one run per step: a prompt goes through in
// chunks of up to max_chunk tokens, multiplied as chunks (WeightProducts::chunk: each weight row
// is read once per chunk), a single decode step through matvec. Both split rows over the pool.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/decoder.hpp"
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

  const Model& model() const { return decoder_.model(); }
  turbokv::ThreadPool& pool() const { return pool_; }

 private:
  // Runs the chunks of tokens in order, calling after_chunk(begin, n) after each with its
  // hidden states in the decoder (rows 0..n-1 = tokens[begin..begin+n-1]).
  template <typename AfterChunk>
  void run_chunks(std::span<const int> tokens, std::span<turbokv::KVCache* const> caches, AfterChunk after_chunk);

  turbokv::ThreadPool& pool_;
  int max_chunk_;
  Decoder decoder_;
  std::vector<size_t> rows_;  // 0, 1, .., max_chunk - 1: a chunk's rows for decoder_.logits()
  std::vector<float> logits_;
};

}  // namespace turbokv::engine
