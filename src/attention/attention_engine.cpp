#include "attention/attention_engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/check.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::attn {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Attention keeps its own pools (one per thread count), so it never nests inside a pool that
// the caller (e.g. the engine's matmuls) is running a job on. A pool already busy with another
// attend() call on another thread is not shared: that call runs on its own thread instead.
struct PoolSlot {
  explicit PoolSlot(int threads) : pool(threads) {}
  ThreadPool pool;
  std::mutex busy;
};

PoolSlot& pool_slot(int threads) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<PoolSlot>> slots;
  std::lock_guard lock(mutex);
  auto& slot = slots[threads];
  if (!slot) slot = std::make_unique<PoolSlot>(threads);
  return *slot;
}

int hardware_threads() {
  static const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return n;
}

}  // namespace

float effective_scale(const AttentionOptions& options, int head_dim) {
  return options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

size_t Tile::horizon(size_t n_tokens) const {
  if (!causal) return n_tokens;
  size_t h = 0;
  for (int r = 0; r < rows; ++r) h = std::max(h, position[r] + 1);
  return std::min(h, n_tokens);
}

size_t Tile::window_start() const {
  if (window == 0) return 0;
  size_t start = position[0] + 1 > window ? position[0] + 1 - window : 0;
  for (int r = 1; r < rows; ++r) start = std::min(start, position[r] + 1 > window ? position[r] + 1 - window : 0);
  return start;
}

void run_parallel(int threads, size_t n_tasks, const std::function<void(size_t)>& fn) {
  if (threads <= 0) threads = hardware_threads();
  threads = std::min(threads, 256);
  if (threads == 1 || n_tasks <= 1) {
    for (size_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  PoolSlot& slot = pool_slot(threads);
  std::unique_lock lock(slot.busy, std::try_to_lock);
  if (!lock.owns_lock()) {
    for (size_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  slot.pool.run_tasks(n_tasks, fn);
}

void gather_query_rows(std::span<const float> queries, int kv_heads, int group, int n_queries,
                       int dim, float* rows, size_t width, size_t offset) {
  const size_t rows_per_head = static_cast<size_t>(group) * n_queries;
  for (int kvh = 0; kvh < kv_heads; ++kvh) {
    for (int g = 0; g < group; ++g) {
      const int h = kvh * group + g;
      for (int qi = 0; qi < n_queries; ++qi) {
        const float* src = queries.data() + (static_cast<size_t>(h) * n_queries + qi) * dim;
        float* dst = rows + (kvh * rows_per_head + static_cast<size_t>(qi) * group + g) * width + offset;
        std::copy(src, src + dim, dst);
      }
    }
  }
}

void scatter_output_rows(const float* rows, size_t width, size_t offset, int kv_heads, int group,
                         int n_queries, int dim, std::span<float> out) {
  const size_t rows_per_head = static_cast<size_t>(group) * n_queries;
  for (int kvh = 0; kvh < kv_heads; ++kvh) {
    for (int g = 0; g < group; ++g) {
      const int h = kvh * group + g;
      for (int qi = 0; qi < n_queries; ++qi) {
        const float* src =
            rows + (kvh * rows_per_head + static_cast<size_t>(qi) * group + g) * width + offset;
        float* dst = out.data() + (static_cast<size_t>(h) * n_queries + qi) * dim;
        std::copy(src, src + dim, dst);
      }
    }
  }
}

float* call_buffer(CallBuffer which, size_t floats) {
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t size = 0;
  };
  thread_local Buffer buffers[static_cast<size_t>(CallBuffer::count)];
  Buffer& b = buffers[static_cast<size_t>(which)];
  if (b.size < floats) {
    b.data.reset();  // before the new one: never both at once
    b.data.reset(new float[floats]);
    b.size = floats;
  }
  return b.data.get();
}

void run_attention(const Problem& p, const BlockSource& source, float* result) {
  const size_t rows_per_head = static_cast<size_t>(p.group) * p.n_queries;
  const size_t tile_rows = static_cast<size_t>(p.tile_rows);
  TURBOKV_CHECK(p.tile_rows >= 1 && p.tile_rows <= kPrefillRows, "attention: tile rows {} outside [1, {}]", p.tile_rows,
                kPrefillRows);
  const size_t tiles = (rows_per_head + tile_rows - 1) / tile_rows;
  const int threads = p.options.threads <= 0 ? hardware_threads() : p.options.threads;

  // Split-K: when heads x tiles give too few tasks to keep every thread busy, cut each head's
  // tokens into ranges (multiples of the block size) and merge the partial statistics after.
  const size_t base_tasks = static_cast<size_t>(p.kv_heads) * tiles;
  const size_t want = threads > 1 ? static_cast<size_t>(threads) * 4 : 1;
  const size_t n_blocks = (p.n_tokens + kBlockTokens - 1) / kBlockTokens;
  size_t splits = base_tasks >= want ? 1 : (want + base_tasks - 1) / base_tasks;
  splits = std::clamp<size_t>(splits, 1, std::max<size_t>(1, n_blocks / 8));
  const size_t blocks_per_split = (n_blocks + splits - 1) / splits;
  splits = std::max<size_t>(1, (n_blocks + blocks_per_split - 1) / blocks_per_split);
  const size_t split_tokens = blocks_per_split * kBlockTokens;

  // Partial results per (head, tile, split): m and l per row, then acc rows. With one split a
  // task's rows are final and go straight to `result`.
  const size_t part_floats = tile_rows * 2 + tile_rows * p.acc_width;
  const size_t n_tasks = base_tasks * splits;
  float* partials = splits > 1 ? call_buffer(CallBuffer::partials, n_tasks * part_floats) : nullptr;

  run_parallel(threads, n_tasks, [&](size_t task) {
    const size_t split = task % splits;
    const size_t tile_index = (task / splits) % tiles;
    const int head = static_cast<int>(task / splits / tiles);
    Tile tile;
    tile.kernels = p.kernels;
    const size_t row0 = tile_index * tile_rows;
    tile.rows = static_cast<int>(std::min<size_t>(tile_rows, rows_per_head - row0));
    tile.q = p.rows + (head * rows_per_head + row0) * p.q_width;
    tile.q_width = p.q_width;
    tile.acc_width = p.acc_width;
    tile.causal = p.options.causal;
    tile.window = p.options.window;
    tile.scale = p.scale;
    tile.softcap = p.options.softcap;
    for (int r = 0; r < tile.rows; ++r) {
      const size_t qi = (row0 + r) / p.group;
      tile.position[r] = p.n_tokens - p.n_queries + qi;  // only used when causal
      tile.m[r] = kNegInf;
      tile.l[r] = 0.0f;
    }
    tile.acc.assign(static_cast<size_t>(tile.rows) * p.acc_width, 0.0f);
    // A sliding window skips the blocks before it (begin stays on a block boundary).
    const size_t begin = std::max(split * split_tokens, tile.window_start() / kBlockTokens * kBlockTokens);
    const size_t end = std::min(tile.horizon(p.n_tokens), (split + 1) * split_tokens);
    if (begin < end) source.process(head, begin, end, tile);
    if (splits == 1) {
      for (int r = 0; r < tile.rows; ++r) {
        // Every causal row sees its own token, so l > 0; guard anyway against a NaN-free zero.
        const float inv = tile.l[r] > 0.0f ? static_cast<float>(1.0 / static_cast<double>(tile.l[r])) : 0.0f;
        const float* acc = tile.acc.data() + r * p.acc_width;
        float* dst = result + (head * rows_per_head + row0 + r) * p.acc_width;
        for (size_t j = 0; j < p.acc_width; ++j) dst[j] = acc[j] * inv;
      }
      return;
    }
    float* part = partials + task * part_floats;
    for (int r = 0; r < tile.rows; ++r) {
      part[r] = tile.m[r];
      part[tile_rows + r] = tile.l[r];
    }
    std::copy(tile.acc.begin(), tile.acc.end(), part + 2 * tile_rows);
  });
  if (splits == 1) return;

  // Merge the splits: acc = sum_s exp(m_s - M) acc_s, l = sum_s exp(m_s - M) l_s.
  for (int head = 0; head < p.kv_heads; ++head) {
    for (size_t tile_index = 0; tile_index < tiles; ++tile_index) {
      const size_t row0 = tile_index * tile_rows;
      const int rows = static_cast<int>(std::min<size_t>(tile_rows, rows_per_head - row0));
      const size_t task0 = (static_cast<size_t>(head) * tiles + tile_index) * splits;
      for (int r = 0; r < rows; ++r) {
        float big = kNegInf;
        for (size_t s = 0; s < splits; ++s) big = std::max(big, partials[(task0 + s) * part_floats + r]);
        float* dst = result + (head * rows_per_head + row0 + r) * p.acc_width;
        std::fill(dst, dst + p.acc_width, 0.0f);
        double l = 0.0;
        for (size_t s = 0; s < splits; ++s) {
          const float* part = partials + (task0 + s) * part_floats;
          if (part[r] == kNegInf) continue;
          const float f = std::exp(part[r] - big);
          l += static_cast<double>(f) * part[tile_rows + r];
          const float* acc = part + 2 * tile_rows + r * p.acc_width;
          for (size_t j = 0; j < p.acc_width; ++j) dst[j] += f * acc[j];
        }
        const float inv = l > 0.0 ? static_cast<float>(1.0 / l) : 0.0f;
        for (size_t j = 0; j < p.acc_width; ++j) dst[j] *= inv;
      }
    }
  }
}

}  // namespace turbokv::attn
