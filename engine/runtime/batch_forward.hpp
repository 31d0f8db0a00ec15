// BatchForward: one step of continuous batching — the next tokens of many sequences through the
// model at once.
//
// Each entry is a run of consecutive tokens of one sequence (one decode token, or a chunk of its
// prompt) with that sequence's per-layer caches. The step is one Decoder step (decoder.hpp, the
// math Forward runs too) over all the entries' rows: every weight matrix is read once per step for
// all of them (matmul_rowwise); attention runs per entry over its own cache (its class's fused
// kernel), entries in the order given, so several consecutive entries of one sequence in one step
// work as if they had come in separate steps.
//
// Batch invariance: an entry's results (the keys and values it appends, its logits) are bit for
// bit what it gets alone in a step, whatever the other entries are and wherever it stands:
//  - every per-row operation (embedding, norms, RoPE, SwiGLU, residuals) reads only its row;
//  - matmul_rowwise computes each row exactly as matvec computes it alone;
//  - attention is called for the entry alone, with the same thread count every step, so its
//    split of the work (which fixes its float summation order) depends only on the entry's own
//    cache and token count.
// What the caller must keep fixed for a sequence's output not to depend on the traffic: how its
// tokens are cut into entries (the server cuts prompts at fixed positions, see server/).
// Note: BatchForward's rows are not bit-identical to Forward's prefill (Forward multiplies a
// chunk in float, WeightProducts::chunk); they are identical to Forward's one-token decode steps.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/decoder.hpp"
#include "turbokv/kv_cache.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

struct BatchEntry {
  std::span<const int> tokens;                // at positions caches[l]->size() onwards
  std::span<turbokv::KVCache* const> caches;  // one per layer, all holding the same tokens
  bool want_logits = false;                   // logits of the entry's last token
  bool all_logits = false;                    // logits of every token (scoring a prompt); implies want_logits
};

class BatchForward {
 public:
  BatchForward(const Model& model, turbokv::ThreadPool& pool, int attention_threads = 0);

  // Runs the step. For the i-th entry with want_logits, logits()[i] holds its last token's
  // logits afterwards (valid until the next call). Throws turbokv::Error (before any cache is
  // touched) on an out-of-range token, an empty entry, or caches of the wrong shape or size.
  void run(std::span<const BatchEntry> entries);
  std::span<const float> logits(size_t entry) const;
  // Every logit row kept for the entry: with all_logits [tokens][vocab], row i the logits
  // after its token i; else its last token's.
  std::span<const float> all_logits(size_t entry) const;

  const Model& model() const { return decoder_.model(); }

 private:
  // Checks every entry (throwing before any cache is touched) and lays the step out as the
  // decoder's runs, each at its position (after an earlier entry of the same sequence).
  void plan(std::span<const BatchEntry> entries);

  Decoder decoder_;
  std::vector<TokenRun> runs_;       // per entry
  std::vector<size_t> logit_slot_;   // per entry: first row in logits_, or SIZE_MAX
  std::vector<size_t> logit_rows_;   // per entry: rows in logits_ (0, 1, or its tokens)
  std::vector<size_t> wanted_rows_;  // the step's rows whose logits are kept, in logits_ order
  std::vector<float> logits_;
};

}  // namespace turbokv::engine
