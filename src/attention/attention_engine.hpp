// The format-independent part of blocked attention: query rows grouped per kv head, tiles of
// rows, online softmax state, split-K over token ranges with a merge of the partial
// (max, sum, acc) statistics, and the threads. Each cache format supplies a BlockSource that
// walks its own storage and calls the kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "turbokv/attention.hpp"

namespace turbokv::attn {

// One tile: up to Problem::tile_rows (kMaxRows, or kPrefillRows for calls with many queries) query
// rows of one kv head (rows of a head are ordered query-major:
// row = query_index * group + head_in_group, so a tile holds neighbouring positions).
struct Tile {
  const KernelTable* kernels = nullptr;
  int rows = 0;
  const float* q = nullptr;  // rows x q_width, prepared by the source
  size_t q_width = 0;
  size_t acc_width = 0;
  bool causal = true;
  size_t window = 0;  // AttentionOptions::window
  float scale = 1.0f;
  float softcap = 0.0f;
  size_t position[kPrefillRows] = {};  // absolute position of each row's query
  float m[kPrefillRows] = {};
  float l[kPrefillRows] = {};
  std::vector<float> acc;                     // rows x acc_width
  alignas(64) float scores[kPrefillRows * kBlockTokens] = {};  // ld = kBlockTokens
  alignas(64) float weights[kPrefillRows * kBlockTokens] = {};
  size_t visible[kPrefillRows] = {};
  size_t hidden[kPrefillRows] = {};  // a block's tokens before a row's window

  // The first token any row of the tile sees (0 without a window).
  size_t window_start() const;

  // Largest position + 1: tokens at or past it are seen by no row of the tile.
  size_t horizon(size_t n_tokens) const;

  // One block of n tokens starting at absolute token `first`: computes visibility, calls
  // dots(scores) to fill raw dot products, runs the softmax update, then accumulate(weights)
  // with the softmax weights in scores. Returns false (and does nothing) if no row sees any
  // token of the block.
  template <typename Dots, typename Accumulate>
  bool step(size_t n, size_t first, Dots&& dots, Accumulate&& accumulate) {
    bool any = false;
    for (int r = 0; r < rows; ++r) {
      size_t vis = n;
      if (causal) vis = position[r] + 1 <= first ? 0 : (position[r] + 1 - first < n ? position[r] + 1 - first : n);
      size_t hid = 0;
      if (window > 0 && position[r] + 1 > window + first) hid = std::min(position[r] + 1 - window - first, n);
      visible[r] = vis;
      hidden[r] = hid;
      any = any || hid < vis;
    }
    if (!any) return false;
    dots(scores);
    kernels->softmax_update(scores, kBlockTokens, rows, n, visible, window > 0 ? hidden : nullptr, scale, softcap, m,
                            l, acc.data(), acc_width, acc_width);
    accumulate(static_cast<const float*>(scores));
    return true;
  }
};

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // Runs tile.step over the tokens [begin, end) of kv head `head`.
  virtual void process(int head, size_t begin, size_t end, Tile& tile) const = 0;
};

struct Problem {
  int kv_heads = 0;
  int group = 1;  // query heads per kv head
  int n_queries = 1;
  size_t n_tokens = 0;
  size_t q_width = 0;    // floats per prepared query row
  size_t acc_width = 0;  // floats per accumulator row
  // Prepared query rows, [kv_heads][group * n_queries][q_width], row order as in Tile.
  const float* rows = nullptr;
  AttentionOptions options;
  float scale = 1.0f;
  const KernelTable* kernels = nullptr;
  // Rows per tile: kMaxRows; kPrefillRows where the source attends prefill tiles with the
  // table's prefill_* kernels (prefill_tile_rows).
  int tile_rows = kMaxRows;
};

// The tile height of a call with n_queries queries: a one-token decode step keeps kMaxRows (its
// bits do not change); a prompt chunk takes kPrefillRows. Depends only on the call's shape, so a
// sequence's results stay independent of the batch it runs in.
inline int prefill_tile_rows(int n_queries) { return n_queries > 1 ? kPrefillRows : kMaxRows; }

// Runs attention for every row and writes the normalized accumulators acc / l to `result`,
// [kv_heads][group * n_queries][acc_width].
void run_attention(const Problem& problem, const BlockSource& source, float* result);

// Per-thread buffers of an attend() call, reused by the thread's next call. A prompt chunk's
// query rows, results and partials are megabytes; as fresh vectors each call, the allocator
// gave them back to the system and every layer faulted them in again, zeroed (issue 29: ten
// times a dense cache's page faults with TurboQuant's wider rows, ~8% of prefill). A buffer
// only grows, to the largest call its thread has made (the engine's chunk size bounds it).
enum class CallBuffer { queries, prepared, rotated, projected, partials, result, count };
// At least `floats` floats of the calling thread's buffer `which`, contents unspecified.
float* call_buffer(CallBuffer which, size_t floats);

// Runs fn(task) for task < n_tasks on `threads` threads (0: all cores, 1: the caller only).
void run_parallel(int threads, size_t n_tasks, const std::function<void(size_t)>& fn);

// The public layout [n_q_heads][n_queries][dim] <-> prepared rows [kv_heads][rows][width]
// (copies dim floats per row to offset `offset` of the row).
void gather_query_rows(std::span<const float> queries, int kv_heads, int group, int n_queries,
                       int dim, float* rows, size_t width, size_t offset);
void scatter_output_rows(const float* rows, size_t width, size_t offset, int kv_heads, int group,
                         int n_queries, int dim, std::span<float> out);

float effective_scale(const AttentionOptions& options, int head_dim);

// Starts loading [p, p + bytes) into L1.
inline void prefetch_bytes(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 3);
}

// Starts loading half `half` (0 or 1) of [p, p + bytes) into L1. Packed sources prefetch the
// next block's keys and values in four such pieces spread over a block's phases: issued at
// once, a block's ~50 lines outran the core's line fill buffers and the prefetch instructions
// themselves stalled (a sixth of a 32K decode step's attention on an Intel Xeon).
inline void prefetch_half(const void* p, size_t bytes, int half) {
  // Through prefetch_bytes' loop on purpose: GCC 12 compiled an earlier form, a loop over
  // cache-line indices, to nothing at all (no error, no prefetch; objdump showed it).
  const size_t middle = bytes / 128 * 64;
  if (half == 0) prefetch_bytes(p, middle);
  else prefetch_bytes(static_cast<const char*>(p) + middle, bytes - middle);
}

}  // namespace turbokv::attn
