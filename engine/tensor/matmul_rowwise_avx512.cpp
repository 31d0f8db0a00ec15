// matmul_rowwise for Q8_0 weights on CPUs with AVX-512 (F, BW, VNNI): register tiles of 4 weight
// rows x 4 activations over 512-bit vectors, each holding two Q8_0 blocks.
//
// Same bits as matvec (dot_q8_row_q8_0, matmul_avx2.cpp): that kernel keeps two 8-lane float
// accumulators, even blocks into one and odd blocks into the other, each block adding
// (dw * dx) * (its eight int32 sums of four products) with one fused multiply-add, and returns
// hsum(even + odd). Here the low 256 bits of a 512-bit accumulator are the even one and the
// high 256 bits the odd one: a block pair's sixteen int32 sums come from one vpdpbusd, and the
// float operations on each lane are the same ones in the same order (dw * dx is exact in float:
// two fp16 values have 11-bit significands). A missing odd block at the end of a row is packed
// as zeros (scale 0 and values 0), which adds +0.0 to an accumulator that is never -0.0 (it
// starts at +0.0, and a rounded-to-nearest sum is -0.0 only when both addends are), so it
// changes nothing. tests/engine/test_matmul_rowwise_tiles.cpp checks the bits against matvec and
// against a scalar model of the lanes, at odd sizes and integer extremes.
//
// Why it is faster than the 256-bit four-activation kernel: each loaded weight pair feeds four
// activations and each activation pair four rows, so the loop is four arithmetic instructions
// (vpdpbusd, convert, scale product, fused multiply-add) per 64 multiply-adds per row and
// activation, on full-width registers, instead of about five per 32.
//
// vpdpbusd multiplies unsigned by signed bytes: the activations are packed offset by 128
// (x ^ 0x80) and each weight pair's sums start at -128 * (sum of each group of four weights), as
// in matmul_rowwise_vnni.cpp.
//
// Data are repacked so the loop reads them with aligned full-width loads: the activations once
// per call for all rows (values, and each block pair's two scales broadcast to eight lanes
// each), the weights one tile of four rows and one chunk of 512 columns at a time (values,
// start sums, scales), into L1 just before every group of four activations passes over it.
// Column chunks are the outer loop of a task (16 rows), so a chunk of the packed activations
// stays in L2 while the task's tiles use it; the accumulators are saved between chunks, which
// does not change the order of any lane's additions.
#include <algorithm>
#include <vector>

#include "engine/tensor/matmul_avx2_common.hpp"
#include "engine/tensor/matmul_kernels.hpp"
#include "turbokv/cpu_features.hpp"
#include "turbokv/thread_pool.hpp"

#if TURBOKV_HAVE_AVX2_KERNELS
#include <cpuid.h>
// GCC 12's AVX-512 intrinsics pass an undefined vector as the unused merge source, which
// -Wmaybe-uninitialized reports at every use (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace turbokv::engine::detail {

namespace {

constexpr size_t kRows = 4;          // weight rows per register tile
constexpr size_t kActs = 4;          // activations per register tile
constexpr size_t kChunkPairs = 8;    // block pairs (512 columns) per column chunk
constexpr size_t kTilesPerTask = 4;  // 16 rows per task handed to a thread
constexpr size_t kPrefetchTiles = 2;  // how far ahead a tile's weights are prefetched

// One weight row's block pair, packed: 64 signed values, the sixteen int32 start sums and the
// sixteen float scales (the even block's scale in lanes 0-7, the odd block's in 8-15).
struct alignas(64) PackedWeightPair {
  int8_t values[64];
  int32_t start[16];
  float scale[16];
};

// A saved accumulator (std::vector<__m512> would drop the type's alignment).
struct alignas(64) SavedAccumulator {
  float lanes[16];
};

// One activation's block pair: 64 values offset by 128, and its two scales as above.
struct alignas(64) PackedActivationPair {
  uint8_t values[64];
  float scale[16];
};

}  // namespace

#if TURBOKV_HAVE_AVX2_KERNELS

#define TKV_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

bool avx512_tile_available() {
  static const bool supported = [] {
    if (!cpu_has_avx512_vnni_vl()) return false;  // includes the OS's ZMM state check
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const bool f = (b & (1u << 16)) != 0, bw = (b & (1u << 30)) != 0;
    return f && bw;
  }();
  return supported;
}

namespace {

// Block pair p of every activation, grouped by four: pairs[(group * P + p) * 4 + i] is
// activation 4 * group + i (activations past n are zeros; their results are discarded).
TKV_AVX512 void pack_activations(const uint8_t* xq, size_t xq_stride, size_t n, size_t blocks,
                                 std::vector<PackedActivationPair>& out) {
  const size_t pairs = (blocks + 1) / 2;
  const size_t groups = (n + kActs - 1) / kActs;
  out.resize(groups * pairs * kActs);
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  for (size_t g = 0; g < groups; ++g) {
    for (size_t i = 0; i < kActs; ++i) {
      const size_t t = g * kActs + i;
      for (size_t p = 0; p < pairs; ++p) {
        PackedActivationPair& dst = out[(g * pairs + p) * kActs + i];
        for (size_t half = 0; half < 2; ++half) {
          const size_t b = 2 * p + half;
          __m256i values = offset;  // value 0
          __m256 scale = _mm256_setzero_ps();
          if (t < n && b < blocks) {
            const uint8_t* block = xq + t * xq_stride + b * 34;
            values = _mm256_xor_si256(avx2::load_q8_values(block), offset);
            scale = _mm256_set1_ps(avx2::load_half(block));
          }
          _mm256_store_si256(reinterpret_cast<__m256i*>(dst.values + 32 * half), values);
          _mm256_store_ps(dst.scale + 8 * half, scale);
        }
      }
    }
  }
}

// Pairs [p0, p1) of rows r0 .. r0 + 3 (rows past `rows` and a missing last odd block are zeros)
// as packed pairs, tile[(p - p0) * 4 + i].
TKV_AVX512 void pack_weights(const uint8_t* base, size_t stride, size_t rows, size_t r0, size_t blocks, size_t p0,
                             size_t p1, PackedWeightPair* tile) {
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  for (size_t i = 0; i < kRows; ++i) {
    const size_t r = r0 + i;
    for (size_t p = p0; p < p1; ++p) {
      PackedWeightPair& dst = tile[(p - p0) * kRows + i];
      __m256i values[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      __m256 scale[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (size_t half = 0; half < 2; ++half) {
        const size_t b = 2 * p + half;
        if (r < rows && b < blocks) {
          const uint8_t* block = base + r * stride + b * 34;
          values[half] = avx2::load_q8_values(block);
          scale[half] = _mm256_set1_ps(avx2::load_half(block));
        }
      }
      const __m512i w = _mm512_inserti64x4(_mm512_zextsi256_si512(values[0]), values[1], 1);
      const __m512i offset_sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, w);
      _mm512_store_si512(dst.values, w);
      _mm512_store_si512(dst.start, _mm512_sub_epi32(_mm512_setzero_si512(), offset_sums));
      _mm256_store_ps(dst.scale, scale[0]);
      _mm256_store_ps(dst.scale + 8, scale[1]);
    }
  }
}

// Starts reading pairs [p0, p1) of rows r .. r + 3 (those below `rows`) into L1 while the tiles
// before them compute. Without it pack_weights waited on each block's first bytes: a step of 17
// rows (a stream beside a 16-token prompt chunk) spent ~35% of its tile time on the scale loads
// that first touch each block (perf annotate, docs/history/benchmarks-notebook.md, "Prefetching
// the next tile"), since a tile's loads are all issued together and then nothing is read during
// its products. A prefetch never faults and changes no result. Always inlined: GCC finds a
// function whose only effect is prefetching free of side effects and deletes calls to it.
TKV_AVX512 __attribute__((always_inline)) inline void prefetch_tile(const uint8_t* base, size_t stride, size_t rows,
                                                                    size_t r, size_t blocks, size_t p0, size_t p1) {
  const size_t first = 2 * p0 * 34, end = std::min(blocks, 2 * p1) * 34;
  if (first >= end) return;
  for (size_t i = 0; i < kRows && r + i < rows; ++i) {
    const char* row = reinterpret_cast<const char*>(base + (r + i) * stride);
    for (size_t at = first; at < end; at += 64) _mm_prefetch(row + at, _MM_HINT_T0);
    _mm_prefetch(row + end - 1, _MM_HINT_T0);
  }
}

// acc[i][j] (row i, activation j of the tile) over `count` pairs; w = the tile's packed pairs,
// x = this activation group's pairs from the same first pair on.
TKV_AVX512 inline void tile_chunk(const PackedWeightPair* w, const PackedActivationPair* x, size_t count,
                                  __m512 (&acc)[kRows][kActs]) {
  for (size_t p = 0; p < count; ++p) {
    const PackedActivationPair* xp = x + p * kActs;
    __m512i xv[kActs];
    __m512 xs[kActs];
#pragma GCC unroll 4
    for (size_t j = 0; j < kActs; ++j) {
      xv[j] = _mm512_load_si512(xp[j].values);
      xs[j] = _mm512_load_ps(xp[j].scale);
    }
    const PackedWeightPair* wp = w + p * kRows;
#pragma GCC unroll 4
    for (size_t i = 0; i < kRows; ++i) {
      const __m512i wv = _mm512_load_si512(wp[i].values);
      const __m512i start = _mm512_load_si512(wp[i].start);
      const __m512 ws = _mm512_load_ps(wp[i].scale);
#pragma GCC unroll 4
      for (size_t j = 0; j < kActs; ++j) {
        const __m512 sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, xv[j], wv));
        acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(ws, xs[j]), sums, acc[i][j]);
      }
    }
  }
}

// The even and odd halves added, then summed as avx2::hsum does: dot_q8_row_q8_0's last line.
TKV_AVX512 inline float finish(__m512 acc) {
  return avx2::hsum(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
}

// Rows [r0, r1) (a task: up to kTilesPerTask tiles) against every activation. Column chunks
// outermost: a chunk of every activation's packed pairs stays in L2 while the task's tiles pass
// over it, and each tile's chunk of weights is packed just before its use, into L1.
TKV_AVX512 void run_task(const uint8_t* base, size_t stride, size_t rows, size_t r0, size_t r1, size_t blocks,
                         size_t n, const PackedActivationPair* acts, float* y) {
  thread_local std::vector<PackedWeightPair> tile;
  thread_local std::vector<SavedAccumulator> saved;  // accumulators between column chunks
  tile.resize(kChunkPairs * kRows);
  const size_t pairs = (blocks + 1) / 2;
  const size_t groups = (n + kActs - 1) / kActs;
  const size_t tiles = (r1 - r0 + kRows - 1) / kRows;
  saved.resize(tiles * groups * kRows * kActs);
  for (size_t p0 = 0; p0 < pairs; p0 += kChunkPairs) {
    const size_t p1 = std::min(pairs, p0 + kChunkPairs);
    for (size_t k = 0; k < tiles; ++k) {
      const size_t t0 = r0 + k * kRows;
      pack_weights(base, stride, rows, t0, blocks, p0, p1, tile.data());
      // The tile kPrefetchTiles on in the order they run: of this chunk, or of the next.
      const size_t ahead = k + kPrefetchTiles;
      if (ahead < tiles) {
        prefetch_tile(base, stride, r1, r0 + ahead * kRows, blocks, p0, p1);
      } else {
        const size_t next_end = std::min(pairs, p1 + kChunkPairs);
        prefetch_tile(base, stride, r1, r0 + (ahead - tiles) * kRows, blocks, p1, next_end);
      }
      for (size_t g = 0; g < groups; ++g) {
        __m512 acc[kRows][kActs];
        SavedAccumulator* keep = saved.data() + (k * groups + g) * kRows * kActs;
        for (size_t i = 0; i < kRows; ++i) {
          for (size_t j = 0; j < kActs; ++j) {
            acc[i][j] = p0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(keep[i * kActs + j].lanes);
          }
        }
        tile_chunk(tile.data(), acts + (g * pairs + p0) * kActs, p1 - p0, acc);
        if (p1 < pairs) {
          for (size_t i = 0; i < kRows; ++i) {
            for (size_t j = 0; j < kActs; ++j) _mm512_store_ps(keep[i * kActs + j].lanes, acc[i][j]);
          }
          continue;
        }
        for (size_t i = 0; i < kRows && t0 + i < rows; ++i) {
          for (size_t j = 0; j < kActs && g * kActs + j < n; ++j) y[(g * kActs + j) * rows + t0 + i] = finish(acc[i][j]);
        }
      }
    }
  }
}

}  // namespace

TKV_AVX512 void matmul_q8_0_avx512(const uint8_t* base, size_t stride, size_t rows, int64_t cols, const uint8_t* xq,
                                   size_t xq_stride, size_t n, float* y, ThreadPool& pool) {
  const size_t blocks = static_cast<size_t>(cols) / 32;
  thread_local std::vector<PackedActivationPair> acts;
  pack_activations(xq, xq_stride, n, blocks, acts);
  const std::vector<PackedActivationPair>& packed = acts;  // the pool's threads read the caller's copy
  const size_t tiles = (rows + kRows - 1) / kRows;
  const size_t tasks = (tiles + kTilesPerTask - 1) / kTilesPerTask;
  pool.run_tasks(tasks, [&](size_t task) {
    const size_t r0 = task * kTilesPerTask * kRows;
    run_task(base, stride, rows, r0, std::min(rows, r0 + kTilesPerTask * kRows), blocks, n, packed.data(), y);
  });
}

#else

bool avx512_tile_available() { return false; }
void matmul_q8_0_avx512(const uint8_t*, size_t, size_t, int64_t, const uint8_t*, size_t, size_t, float*,
                        ThreadPool&) {}

#endif

}  // namespace turbokv::engine::detail
