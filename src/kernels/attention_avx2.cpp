// AVX2 + FMA + F16C block kernels for attention (x86-64), chosen at run time when the CPU has
// them; attention_scalar.cpp is the fallback and the oracle these are tested against.
//
// Packed codes are decoded to centroid floats in registers: 8 codes of b bits are b bytes, so a
// chunk of 8 always starts on a byte; one 32-bit broadcast (two for b >= 5) and a per-lane
// variable shift put code i in the low bits of lane i, and the codebook lookup is a register
// permute (b <= 3: one vpermps over the 8-entry table, replicated for b < 3; b = 4: two
// permutes and a blend on bit 3) or, for b >= 5, a gather from the table in L1. Whole runs of
// 16 or 32 4-bit codes take a faster byte-shuffle decode instead (see "4-bit codes" below),
// whose output order (kChunkOrder4) the per-chunk 4-bit decode reproduces.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention/attention_kernels.hpp"
#include "kernels/attention_int8_kernels.hpp"
#include "kernels/attention_prefill_kernels.hpp"
#include "turbokv/codec.hpp"
#include "turbokv/cpu_features.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TURBOKV_ATTENTION_AVX2 1
#endif

#ifdef TURBOKV_ATTENTION_AVX2
#include <immintrin.h>

TURBOKV_TARGET_BEGIN("avx2,fma,f16c")

namespace turbokv::attn {
namespace {

// The decode helpers must inline into the block loops: a call per chunk of 8 codes costs more
// than the decode itself (GCC declined to inline decode_chunk<4> on its own).
#define TURBOKV_INLINE inline __attribute__((always_inline))

inline float hsum(__m256 a) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

// Lane i of the result is the sum of the lanes of a[i].
inline __m256 reduce8(const __m256* a) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23);
  const __m256 s4567 = _mm256_hadd_ps(s45, s67);
  const __m256 lo = _mm256_permute2f128_ps(s0123, s4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(s0123, s4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

// Reduces n accumulators to n floats.
template <int N>
inline void reduce_all(const __m256* acc, float* out) {
  int i = 0;
  for (; i + 8 <= N; i += 8) _mm256_storeu_ps(out + i, reduce8(acc + i));
  for (; i < N; ++i) out[i] = hsum(acc[i]);
}

// Keeps a loaded vector in a register: otherwise the compiler folds the load into each FMA
// that uses it, and 256-bit loads, not FMAs, become the bottleneck.
inline __m256 keep_in_register(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(*p)));
}

// The dense kernels request the rows kPrefetchRows tokens ahead of the one they read: with the
// hardware prefetchers alone (the kernels alternate between a block's keys and its values) the
// fp16 path was ~12% slower at 32K tokens on 2 threads. The address is computed as an integer
// because near the end of a page it lies past the allocation (a prefetch never faults).
constexpr int kPrefetchRows = 8;
TURBOKV_INLINE void prefetch_rows(const void* base, size_t offset, size_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(base) + offset;
  for (size_t i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(at + i), _MM_HINT_T0);
}

// ---- dense keys/values ----------------------------------------------------------------------

template <int R, int T, typename Key>
void dots_tile(const float* q, size_t qs, const Key* keys, size_t n, int dim, float* scores,
               size_t ld) {
  const int full = dim & ~7;
  size_t t = 0;
  for (; t + T <= n; t += T) {
    __m256 acc[R * T];
    for (int i = 0; i < R * T; ++i) acc[i] = _mm256_setzero_ps();
    const Key* k0 = keys + t * dim;
    prefetch_rows(k0, kPrefetchRows * dim * sizeof(Key), T * dim * sizeof(Key));
    for (int j = 0; j < full; j += 8) {
      __m256 k[T];
      for (int u = 0; u < T; ++u) k[u] = load8(k0 + u * dim + j);
      for (int r = 0; r < R; ++r) {
        const __m256 qv = keep_in_register(_mm256_loadu_ps(q + r * qs + j));
        for (int u = 0; u < T; ++u) acc[r * T + u] = _mm256_fmadd_ps(qv, k[u], acc[r * T + u]);
      }
    }
    float sums[R * T];
    reduce_all<R * T>(acc, sums);
    for (int j = full; j < dim; ++j) {
      for (int r = 0; r < R; ++r) {
        for (int u = 0; u < T; ++u) sums[r * T + u] += q[r * qs + j] * load1(k0 + u * dim + j);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < T; ++u) scores[r * ld + t + u] = sums[r * T + u];
    }
  }
  if constexpr (T > 1) {
    if (t < n) dots_tile<R, 1>(q, qs, keys + t * dim, n - t, dim, scores + t, ld);
  }
}

template <int R, int CW, typename Value>
void accumulate_tile(const float* w, size_t ld, const Value* values, size_t n, int dim, int j0,
                     int j1, float* acc, size_t as) {
  int j = j0;
  for (; j + 8 * CW <= j1; j += 8 * CW) {
    __m256 a[R * CW];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < CW; ++u) a[r * CW + u] = _mm256_loadu_ps(acc + r * as + j + 8 * u);
    }
    for (size_t t = 0; t < n; ++t) {
      __m256 v[CW];
      for (int u = 0; u < CW; ++u) v[u] = load8(values + t * dim + j + 8 * u);
      for (int r = 0; r < R; ++r) {
        const __m256 wv = _mm256_broadcast_ss(w + r * ld + t);
        for (int u = 0; u < CW; ++u) a[r * CW + u] = _mm256_fmadd_ps(wv, v[u], a[r * CW + u]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < CW; ++u) _mm256_storeu_ps(acc + r * as + j + 8 * u, a[r * CW + u]);
    }
  }
  if constexpr (CW > 1) {
    if (j + 8 <= j1) accumulate_tile<R, 1>(w, ld, values, n, dim, j, j1, acc, as);
  }
}

template <int R, typename Value>
void accumulate_rows(const float* w, size_t ld, const Value* values, size_t n, int dim,
                     float* acc, size_t as) {
  constexpr int kCw = R <= 2 ? 4 : (R <= 4 ? 2 : 1);
  const int full = dim & ~7;
  accumulate_tile<R, kCw>(w, ld, values, n, dim, 0, full, acc, as);
  for (int j = full; j < dim; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = acc[r * as + j];
      for (size_t t = 0; t < n; ++t) s += w[r * ld + t] * load1(values + t * dim + j);
      acc[r * as + j] = s;
    }
  }
}

// Splits a tile of rows into the instantiated widths 8 (if max_width allows), 4, 2, 1.
template <typename Fn>
void for_row_pieces(int rows, Fn&& fn, int max_width = 8) {
  int r = 0;
  while (r < rows) {
    const int left = rows - r;
    const int width = left >= 8 && max_width >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    fn(r, width);
    r += width;
  }
}

// Dense blocks are cheap to re-read from L1 and convert, so 8 rows run as two passes of 4,
// which keep two tokens per query load (8 rows x 1 token is bound by the query loads).
constexpr int kDenseMaxRows = 4;

template <typename Key>
void dots_dense(const float* q, size_t qs, int rows, const Key* keys, size_t n, int dim,
                float* scores, size_t ld) {
  for_row_pieces(rows, [&](int r, int width) {
    const float* qr = q + r * qs;
    float* sr = scores + r * ld;
    switch (width) {
      case 8: dots_tile<8, 1>(qr, qs, keys, n, dim, sr, ld); break;
      case 4: dots_tile<4, 2>(qr, qs, keys, n, dim, sr, ld); break;
      case 2: dots_tile<2, 4>(qr, qs, keys, n, dim, sr, ld); break;
      default: dots_tile<1, 4>(qr, qs, keys, n, dim, sr, ld); break;
    }
  }, kDenseMaxRows);
}

template <typename Value>
void accumulate_dense(const float* w, size_t ld, int rows, const Value* values, size_t n, int dim,
                      float* acc, size_t as) {
  for_row_pieces(rows, [&](int r, int width) {
    const float* wr = w + r * ld;
    float* ar = acc + r * as;
    switch (width) {
      case 8: accumulate_rows<8>(wr, ld, values, n, dim, ar, as); break;
      case 4: accumulate_rows<4>(wr, ld, values, n, dim, ar, as); break;
      case 2: accumulate_rows<2>(wr, ld, values, n, dim, ar, as); break;
      default: accumulate_rows<1>(wr, ld, values, n, dim, ar, as); break;
    }
  }, kDenseMaxRows);
}

void dots_f16(const float* q, size_t qs, int rows, const uint16_t* keys, size_t n, int dim,
              float* scores, size_t ld) {
  dots_dense(q, qs, rows, keys, n, dim, scores, ld);
}
void dots_f32(const float* q, size_t qs, int rows, const float* keys, size_t n, int dim,
              float* scores, size_t ld) {
  dots_dense(q, qs, rows, keys, n, dim, scores, ld);
}
// fp16 values are first converted, kValueRun whole rows at a time in memory order, into a float
// buffer in L1, and accumulated from there. The accumulation itself walks a few dims of every
// token at a time (so R rows x a few chunks of accumulators stay in registers); walking the
// fp16 rows in memory that way, 256 bytes apart, read ~25% below the streaming bandwidth,
// while the row-order conversion streams at full speed.
constexpr size_t kValueRun = 16;
constexpr int kMaxBufferedDim = 512;

void accumulate_f16(const float* w, size_t ld, int rows, const uint16_t* values, size_t n,
                    int dim, float* acc, size_t as) {
  if (dim > kMaxBufferedDim) {
    accumulate_dense(w, ld, rows, values, n, dim, acc, as);
    return;
  }
  alignas(32) float buffer[kValueRun * kMaxBufferedDim];
  const int full = dim & ~7;
  for (size_t t0 = 0; t0 < n; t0 += kValueRun) {
    const size_t m = n - t0 < kValueRun ? n - t0 : kValueRun;
    const uint16_t* src = values + t0 * dim;
    for (size_t i = 0; i < m; ++i) {
      prefetch_rows(src, (i + kPrefetchRows) * dim * sizeof(uint16_t), dim * sizeof(uint16_t));
      int j = 0;
      for (; j < full; j += 8) _mm256_storeu_ps(buffer + i * dim + j, load8(src + i * dim + j));
      for (; j < dim; ++j) buffer[i * dim + j] = load1(src + i * dim + j);
    }
    accumulate_dense(w + t0, ld, rows, static_cast<const float*>(buffer), m, dim, acc, as);
  }
}
void accumulate_f32(const float* w, size_t ld, int rows, const float* values, size_t n, int dim,
                    float* acc, size_t as) {
  accumulate_dense(w, ld, rows, values, n, dim, acc, as);
}

// ---- packed codes ---------------------------------------------------------------------------

TURBOKV_INLINE __m256i broadcast_u32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return _mm256_set1_epi32(static_cast<int>(u));
}

// Lane i gets code i of the chunk at p in its low B bits (higher bits hold later codes).
// Reads exactly the chunk's B bytes for B = 1, 2 and 4 bytes for B = 3, 4, so only widths 3
// and >= 5 read past the chunk (at most one byte past the codes; see finish_code_group).
template <int B>
TURBOKV_INLINE __m256i chunk_codes(const uint8_t* p) {
  if constexpr (B == 4) {
    // 4-bit chunks come out in kChunkOrder4, the order of the byte-shuffle decode below.
    return _mm256_srlv_epi32(broadcast_u32(p), _mm256_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28));
  } else if constexpr (B < 4) {
    const __m256i shifts = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
    __m256i words;
    if constexpr (B == 1) {
      words = _mm256_set1_epi32(p[0]);
    } else if constexpr (B == 2) {
      uint16_t u;
      std::memcpy(&u, p, sizeof u);
      words = _mm256_set1_epi32(u);
    } else {
      words = broadcast_u32(p);
    }
    return _mm256_srlv_epi32(words, shifts);
  } else {
    // Codes 4..7 start at bit 4B = 8 * (B / 2) + 4 * (B & 1).
    constexpr int kHi = 4 * (B & 1);
    const __m256i shifts = _mm256_setr_epi32(0, B, 2 * B, 3 * B, kHi, kHi + B, kHi + 2 * B,
                                             kHi + 3 * B);
    const __m256i words = _mm256_blend_epi32(broadcast_u32(p), broadcast_u32(p + B / 2), 0xf0);
    return _mm256_srlv_epi32(words, shifts);
  }
}

// The same for a chunk near the end of a record: copies what is left into a zeroed buffer.
template <int B>
TURBOKV_INLINE __m256i chunk_codes_tail(const uint8_t* p, size_t available) {
  uint8_t buffer[16] = {};
  std::memcpy(buffer, p, available < 16 ? available : 16);
  return chunk_codes<B>(buffer);
}

template <int B>
struct Codebook {
  __m256 lo, hi;
  const float* table;
  explicit Codebook(const float* t) : table(t) {
    if constexpr (B <= 3) {
      float rep[8];
      for (int i = 0; i < 8; ++i) rep[i] = t[i % (1 << B)];
      lo = _mm256_loadu_ps(rep);
      hi = lo;
    } else if constexpr (B == 4) {
      lo = _mm256_loadu_ps(t);
      hi = _mm256_loadu_ps(t + 8);
    } else {
      lo = hi = _mm256_setzero_ps();
    }
  }
  TURBOKV_INLINE __m256 lookup(__m256i idx) const {
    if constexpr (B <= 3) {
      return _mm256_permutevar8x32_ps(lo, idx);  // uses the low 3 bits of each lane
    } else if constexpr (B == 4) {
      const __m256 a = _mm256_permutevar8x32_ps(lo, idx);
      const __m256 b = _mm256_permutevar8x32_ps(hi, idx);
      return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    } else {
      const __m256i masked = _mm256_and_si256(idx, _mm256_set1_epi32((1 << B) - 1));
      return _mm256_i32gather_ps(table, masked, 4);
    }
  }
};

template <int B>
TURBOKV_INLINE __m256 decode_chunk(const Codebook<B>& book, const uint8_t* group_codes, int c, int safe,
                           size_t available_from_group) {
  const uint8_t* p = group_codes + static_cast<size_t>(c) * B;
  if (c < safe) return book.lookup(chunk_codes<B>(p));
  return book.lookup(chunk_codes_tail<B>(p, available_from_group - static_cast<size_t>(c) * B));
}

template <int B, int R, int T>
void group_dots_tile(const float* q, size_t qs, const uint8_t* records, size_t code_size, size_t n,
                     const CodeGroup& g, float* scores, size_t ld, bool add) {
  const Codebook<B> book(g.table);
  const int chunks = g.chunks();
  const int safe = g.safe_chunks;
  const size_t available = code_size - g.offset;
  size_t t = 0;
  for (; t + T <= n; t += T) {
    __m256 acc[R * T];
    for (int i = 0; i < R * T; ++i) acc[i] = _mm256_setzero_ps();
    const uint8_t* rec = records + t * code_size + g.offset;
    for (int c = 0; c < chunks; ++c) {
      __m256 k[T];
      for (int u = 0; u < T; ++u) k[u] = decode_chunk<B>(book, rec + u * code_size, c, safe, available);
      for (int r = 0; r < R; ++r) {
        const __m256 qv = keep_in_register(_mm256_loadu_ps(q + r * qs + 8 * c));
        for (int u = 0; u < T; ++u) acc[r * T + u] = _mm256_fmadd_ps(qv, k[u], acc[r * T + u]);
      }
    }
    float sums[R * T];
    reduce_all<R * T>(acc, sums);
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < T; ++u) {
        float& s = scores[r * ld + t + u];
        s = add ? s + sums[r * T + u] : sums[r * T + u];
      }
    }
  }
  if constexpr (T > 1) {
    if (t < n) {
      group_dots_tile<B, R, 1>(q, qs, records + t * code_size, code_size, n - t, g, scores + t,
                               ld, add);
    }
  }
}

template <int B, int R, int CW>
void group_accumulate_tile(const float* w, size_t ld, const uint8_t* records, size_t code_size,
                           size_t n, const CodeGroup& g, int c0, float* acc, size_t as) {
  const Codebook<B> book(g.table);
  const int chunks = g.chunks();
  const int safe = g.safe_chunks;
  const size_t available = code_size - g.offset;
  int c = c0;
  for (; c + CW <= chunks; c += CW) {
    __m256 a[R * CW];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < CW; ++u) a[r * CW + u] = _mm256_loadu_ps(acc + r * as + 8 * (c + u));
    }
    const uint8_t* rec = records + g.offset;
    for (size_t t = 0; t < n; ++t, rec += code_size) {
      __m256 v[CW];
      for (int u = 0; u < CW; ++u) v[u] = decode_chunk<B>(book, rec, c + u, safe, available);
      for (int r = 0; r < R; ++r) {
        const __m256 wv = _mm256_broadcast_ss(w + r * ld + t);
        for (int u = 0; u < CW; ++u) a[r * CW + u] = _mm256_fmadd_ps(wv, v[u], a[r * CW + u]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < CW; ++u) _mm256_storeu_ps(acc + r * as + 8 * (c + u), a[r * CW + u]);
    }
  }
  if constexpr (CW > 1) {
    if (c < chunks) group_accumulate_tile<B, R, 1>(w, ld, records, code_size, n, g, c, acc, as);
  }
}

template <int B>
void group_dots_bits(const float* q, size_t qs, int rows, const uint8_t* records,
                     size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld,
                     bool add) {
  for_row_pieces(rows, [&](int r, int width) {
    const float* qr = q + r * qs;
    float* sr = scores + r * ld;
    switch (width) {
      case 8: group_dots_tile<B, 8, 1>(qr, qs, records, code_size, n, g, sr, ld, add); break;
      case 4: group_dots_tile<B, 4, 2>(qr, qs, records, code_size, n, g, sr, ld, add); break;
      case 2: group_dots_tile<B, 2, 4>(qr, qs, records, code_size, n, g, sr, ld, add); break;
      default: group_dots_tile<B, 1, 4>(qr, qs, records, code_size, n, g, sr, ld, add); break;
    }
  });
}

template <int B>
void group_accumulate_bits(const float* w, size_t ld, int rows, const uint8_t* records,
                           size_t code_size, size_t n, const CodeGroup& g, float* acc,
                           size_t as) {
  for_row_pieces(rows, [&](int r, int width) {
    const float* wr = w + r * ld;
    float* ar = acc + r * as;
    switch (width) {
      case 8: group_accumulate_tile<B, 8, 1>(wr, ld, records, code_size, n, g, 0, ar, as); break;
      case 4: group_accumulate_tile<B, 4, 2>(wr, ld, records, code_size, n, g, 0, ar, as); break;
      case 2: group_accumulate_tile<B, 2, 4>(wr, ld, records, code_size, n, g, 0, ar, as); break;
      default: group_accumulate_tile<B, 1, 4>(wr, ld, records, code_size, n, g, 0, ar, as); break;
    }
  });
}

// ---- 4-bit codes: byte-shuffle decode ----------------------------------------------------------
//
// The 16 centroids, split into their four bytes, make four 16-entry byte tables; vpshufb looks
// up 32 codes in each, and two rounds of unpacks put the bytes back together as floats. The
// unpacks work within 128-bit lanes, so the floats come out in a fixed order: lane 0 decodes the
// low nibbles (even codes), lane 1 the high nibbles (odd codes), and chunk k (codes 8k..8k+7)
// lands as codes 8k + {0, 2, 4, 6, 1, 3, 5, 7} (kChunkOrder4). The attention source lays out
// query rows and value accumulators of 4-bit groups in that order (KernelTable::chunk_order4),
// so no kernel ever moves floats back into coordinate order.
constexpr uint8_t kChunkOrder4[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct Nibble4Book {
  __m256i plane[4];
  explicit Nibble4Book(const float* table) {
    alignas(16) uint8_t bytes[4][16];
    for (int i = 0; i < 16; ++i) {
      uint32_t u;
      std::memcpy(&u, table + i, sizeof u);
      for (int b = 0; b < 4; ++b) bytes[b][i] = static_cast<uint8_t>(u >> (8 * b));
    }
    for (int b = 0; b < 4; ++b) {
      plane[b] = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(bytes[b])));
    }
  }
};

// Lane 0: the low nibble of each byte, lane 1: the high nibble.
TURBOKV_INLINE __m256i split_nibbles(__m256i bytes) {
  return _mm256_and_si256(_mm256_blend_epi32(bytes, _mm256_srli_epi16(bytes, 4), 0xf0),
                          _mm256_set1_epi8(0x0f));
}

// 32 codes (the 16 bytes at p) -> chunks 0..3 in kChunkOrder4.
TURBOKV_INLINE void decode32(const Nibble4Book& book, const uint8_t* p, __m256* out) {
  const __m256i codes =
      split_nibbles(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  const __m256i b0 = _mm256_shuffle_epi8(book.plane[0], codes);
  const __m256i b1 = _mm256_shuffle_epi8(book.plane[1], codes);
  const __m256i b2 = _mm256_shuffle_epi8(book.plane[2], codes);
  const __m256i b3 = _mm256_shuffle_epi8(book.plane[3], codes);
  const __m256i lo01 = _mm256_unpacklo_epi8(b0, b1), hi01 = _mm256_unpackhi_epi8(b0, b1);
  const __m256i lo23 = _mm256_unpacklo_epi8(b2, b3), hi23 = _mm256_unpackhi_epi8(b2, b3);
  out[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo01, lo23));
  out[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo01, lo23));
  out[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(hi01, hi23));
  out[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(hi01, hi23));
}

// 16 codes (the 8 bytes at p) -> chunks 0..1 in kChunkOrder4.
TURBOKV_INLINE void decode16(const Nibble4Book& book, const uint8_t* p, __m256* out) {
  int64_t u;
  std::memcpy(&u, p, sizeof u);
  const __m256i codes = split_nibbles(_mm256_set1_epi64x(u));
  const __m256i w01 = _mm256_unpacklo_epi8(_mm256_shuffle_epi8(book.plane[0], codes),
                                           _mm256_shuffle_epi8(book.plane[1], codes));
  const __m256i w23 = _mm256_unpacklo_epi8(_mm256_shuffle_epi8(book.plane[2], codes),
                                           _mm256_shuffle_epi8(book.plane[3], codes));
  out[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(w01, w23));
  out[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(w01, w23));
}

// Scores of 4-bit groups: one token at a time, 32 codes per shuffle decode, R query rows (two
// accumulators per row when R <= 4 to halve the FMA dependency chains); chunks past the last
// full 32 go through the generic per-chunk decode (same order). kBlocks > 0 fixes the number of
// 32-code blocks at compile time (head_dim 64 and 128) so the block loop unrolls.
template <int R, int kBlocks = 0>
void dots4_tile(const float* q, size_t qs, const uint8_t* records, size_t code_size, size_t n,
                const CodeGroup& g, float* scores, size_t ld, bool add) {
  constexpr int kAcc = R <= 4 ? 2 : 1;
  const Nibble4Book book(g.table);
  const Codebook<4> tail_book(g.table);
  const int blocks = kBlocks > 0 ? kBlocks : g.dims / 32;
  const int chunks = g.chunks();
  const size_t available = code_size - g.offset;
  if (n > kBlockTokens) {  // the sources pass blocks; other callers are split here
    for (size_t t0 = 0; t0 < n; t0 += kBlockTokens) {
      const size_t m = n - t0 < kBlockTokens ? n - t0 : kBlockTokens;
      dots4_tile<R, kBlocks>(q, qs, records + t0 * code_size, code_size, m, g, scores + t0, ld, add);
    }
    return;
  }
  // Each token leaves one vector of partial sums per row in part[r][t % 8]; every 8 tokens a
  // reduce8 per row turns them into 8 scores at once (lane = token). Reducing every token on
  // its own ended each token in a chain of horizontal adds that the next token queued behind.
  alignas(32) __m256 part[R][8];
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* rec = records + t * code_size + g.offset;
    __m256 acc[R][kAcc];
    for (int r = 0; r < R; ++r) {
      for (int a = 0; a < kAcc; ++a) acc[r][a] = _mm256_setzero_ps();
    }
#pragma GCC unroll 8
    for (int b = 0; b < blocks; ++b) {
      __m256 k[4];
      decode32(book, rec + 16 * b, k);
      for (int u = 0; u < 4; ++u) {
        for (int r = 0; r < R; ++r) {
          acc[r][u % kAcc] = _mm256_fmadd_ps(k[u], _mm256_loadu_ps(q + r * qs + 32 * b + 8 * u), acc[r][u % kAcc]);
        }
      }
    }
    for (int c = 4 * blocks; c < chunks; ++c) {
      const __m256 k = decode_chunk<4>(tail_book, rec, c, g.safe_chunks, available);
      for (int r = 0; r < R; ++r) acc[r][0] = _mm256_fmadd_ps(k, _mm256_loadu_ps(q + r * qs + 8 * c), acc[r][0]);
    }
    const size_t lane = t & 7;
    for (int r = 0; r < R; ++r) {
      __m256 row = acc[r][0];
      for (int a = 1; a < kAcc; ++a) row = _mm256_add_ps(row, acc[r][a]);
      part[r][lane] = row;
    }
    if (lane == 7 || t + 1 == n) {
      const size_t t0 = t - lane;
      const size_t m = lane + 1;
      for (int r = 0; r < R; ++r) {
        for (size_t i = m; i < 8; ++i) part[r][i] = _mm256_setzero_ps();
        __m256 sum = reduce8(part[r]);
        float* dst = scores + r * ld + t0;
        if (m == 8) {
          if (add) sum = _mm256_add_ps(sum, _mm256_loadu_ps(dst));
          _mm256_storeu_ps(dst, sum);
        } else {
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, sum);
          for (size_t i = 0; i < m; ++i) dst[i] = add ? dst[i] + lanes[i] : lanes[i];
        }
      }
    }
  }
}

// Value accumulation for 4-bit groups: 16 codes per shuffle decode (2 chunks x R <= 4 rows of
// accumulators stay in registers across the block's tokens), the odd last chunks generic.
template <int R>
void accumulate4_tile(const float* w, size_t ld, const uint8_t* records, size_t code_size,
                      size_t n, const CodeGroup& g, float* acc, size_t as) {
  const Nibble4Book book(g.table);
  const int pairs = g.dims / 16;
  const uint8_t* base = records + g.offset;
  for (int h = 0; h < pairs; ++h) {
    __m256 a[R][2];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < 2; ++u) a[r][u] = _mm256_loadu_ps(acc + r * as + 16 * h + 8 * u);
    }
    const uint8_t* rec = base + 8 * h;
    for (size_t t = 0; t < n; ++t, rec += code_size) {
      __m256 v[2];
      decode16(book, rec, v);
      for (int r = 0; r < R; ++r) {
        const __m256 wv = _mm256_broadcast_ss(w + r * ld + t);
        a[r][0] = _mm256_fmadd_ps(wv, v[0], a[r][0]);
        a[r][1] = _mm256_fmadd_ps(wv, v[1], a[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < 2; ++u) _mm256_storeu_ps(acc + r * as + 16 * h + 8 * u, a[r][u]);
    }
  }
  if (2 * pairs < g.chunks()) group_accumulate_tile<4, R, 1>(w, ld, records, code_size, n, g, 2 * pairs, acc, as);
}

template <>
void group_dots_bits<4>(const float* q, size_t qs, int rows, const uint8_t* records,
                        size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld,
                        bool add) {
  for_row_pieces(rows, [&](int r, int width) {
    const float* qr = q + r * qs;
    float* sr = scores + r * ld;
    switch (width) {
      case 8: dots4_tile<8>(qr, qs, records, code_size, n, g, sr, ld, add); break;
      case 4:
        if (g.dims == 128) dots4_tile<4, 4>(qr, qs, records, code_size, n, g, sr, ld, add);
        else if (g.dims == 64) dots4_tile<4, 2>(qr, qs, records, code_size, n, g, sr, ld, add);
        else dots4_tile<4>(qr, qs, records, code_size, n, g, sr, ld, add);
        break;
      case 2: dots4_tile<2>(qr, qs, records, code_size, n, g, sr, ld, add); break;
      default: dots4_tile<1>(qr, qs, records, code_size, n, g, sr, ld, add); break;
    }
  });
}

template <>
void group_accumulate_bits<4>(const float* w, size_t ld, int rows, const uint8_t* records,
                              size_t code_size, size_t n, const CodeGroup& g, float* acc,
                              size_t as) {
  for_row_pieces(rows, [&](int r, int width) {
    const float* wr = w + r * ld;
    float* ar = acc + r * as;
    switch (width) {
      case 4: accumulate4_tile<4>(wr, ld, records, code_size, n, g, ar, as); break;
      case 2: accumulate4_tile<2>(wr, ld, records, code_size, n, g, ar, as); break;
      default: accumulate4_tile<1>(wr, ld, records, code_size, n, g, ar, as); break;
    }
  }, 4);
}

void group_dots(const float* q, size_t qs, int rows, const uint8_t* records, size_t code_size,
                size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  switch (g.bits) {
    case 1: group_dots_bits<1>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
    case 2: group_dots_bits<2>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
    case 3: group_dots_bits<3>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
    case 4: group_dots_bits<4>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
    case 5: group_dots_bits<5>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
    case 6: group_dots_bits<6>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
    case 7: group_dots_bits<7>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
    default: group_dots_bits<8>(q, qs, rows, records, code_size, n, g, scores, ld, add); break;
  }
}

void group_accumulate(const float* w, size_t ld, int rows, const uint8_t* records,
                      size_t code_size, size_t n, const CodeGroup& g, float* acc, size_t as) {
  switch (g.bits) {
    case 1: group_accumulate_bits<1>(w, ld, rows, records, code_size, n, g, acc, as); break;
    case 2: group_accumulate_bits<2>(w, ld, rows, records, code_size, n, g, acc, as); break;
    case 3: group_accumulate_bits<3>(w, ld, rows, records, code_size, n, g, acc, as); break;
    case 4: group_accumulate_bits<4>(w, ld, rows, records, code_size, n, g, acc, as); break;
    case 5: group_accumulate_bits<5>(w, ld, rows, records, code_size, n, g, acc, as); break;
    case 6: group_accumulate_bits<6>(w, ld, rows, records, code_size, n, g, acc, as); break;
    case 7: group_accumulate_bits<7>(w, ld, rows, records, code_size, n, g, acc, as); break;
    default: group_accumulate_bits<8>(w, ld, rows, records, code_size, n, g, acc, as); break;
  }
}

// Decodes whole records, chunk by chunk, in the per-chunk decode's order (kChunkOrder4 for 4-bit
// codes, which is chunk_order4): the layout the prepared query rows and accumulators use.
template <int B>
void group_decode_bits(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g, float* out,
                       size_t ld) {
  const Codebook<B> book(g.table);
  const int chunks = g.chunks();
  const size_t available = code_size - g.offset;
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* rec = records + t * code_size + g.offset;
    for (int c = 0; c < chunks; ++c) {
      _mm256_storeu_ps(out + t * ld + 8 * c, decode_chunk<B>(book, rec, c, g.safe_chunks, available));
    }
  }
}

void group_decode(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g, float* out,
                  size_t ld) {
  switch (g.bits) {
    case 1: group_decode_bits<1>(records, code_size, n, g, out, ld); break;
    case 2: group_decode_bits<2>(records, code_size, n, g, out, ld); break;
    case 3: group_decode_bits<3>(records, code_size, n, g, out, ld); break;
    case 4: group_decode_bits<4>(records, code_size, n, g, out, ld); break;
    case 5: group_decode_bits<5>(records, code_size, n, g, out, ld); break;
    case 6: group_decode_bits<6>(records, code_size, n, g, out, ld); break;
    case 7: group_decode_bits<7>(records, code_size, n, g, out, ld); break;
    default: group_decode_bits<8>(records, code_size, n, g, out, ld); break;
  }
}

// ---- 8-bit codes on VBMI CPUs -------------------------------------------------------------------
//
// The VNNI table's group kernels: 8-bit groups of >= 64 coordinates are decoded to float rows in
// L1 (decode_codes8_vbmi, no gathers) and run through the dense float kernels, kValueRun tokens
// at a time; every other group goes to the AVX2 kernels above.
constexpr size_t kCodes8Run = 16;

bool codes8_buffered(const CodeGroup& g) { return g.bits == 8 && g.dims >= 64 && g.dims <= kMaxBufferedDim; }

void group_dots8(const float* q, size_t qs, int rows, const uint8_t* records, size_t code_size, size_t n,
                 const CodeGroup& g, float* scores, size_t ld, bool add) {
  if (!codes8_buffered(g)) {
    group_dots(q, qs, rows, records, code_size, n, g, scores, ld, add);
    return;
  }
  alignas(64) float buffer[kCodes8Run * kMaxBufferedDim];
  alignas(32) float part[kMaxRows * kCodes8Run];
  for (size_t t0 = 0; t0 < n; t0 += kCodes8Run) {
    const size_t m = n - t0 < kCodes8Run ? n - t0 : kCodes8Run;
    decode_codes8_vbmi(g.table, records + t0 * code_size, code_size, g.offset, m, g.dims, buffer);
    float* dst = add ? part : scores + t0;
    const size_t dst_ld = add ? kCodes8Run : ld;
    dots_dense(q, qs, rows, static_cast<const float*>(buffer), m, g.dims, dst, dst_ld);
    if (add) {
      for (int r = 0; r < rows; ++r) {
        for (size_t i = 0; i < m; ++i) scores[r * ld + t0 + i] += part[r * kCodes8Run + i];
      }
    }
  }
}

void group_accumulate8(const float* w, size_t ld, int rows, const uint8_t* records, size_t code_size,
                       size_t n, const CodeGroup& g, float* acc, size_t as) {
  if (!codes8_buffered(g)) {
    group_accumulate(w, ld, rows, records, code_size, n, g, acc, as);
    return;
  }
  alignas(64) float buffer[kCodes8Run * kMaxBufferedDim];
  for (size_t t0 = 0; t0 < n; t0 += kCodes8Run) {
    const size_t m = n - t0 < kCodes8Run ? n - t0 : kCodes8Run;
    decode_codes8_vbmi(g.table, records + t0 * code_size, code_size, g.offset, m, g.dims, buffer);
    accumulate_dense(w + t0, ld, rows, static_cast<const float*>(buffer), m, g.dims, acc, as);
  }
}

// ---- norms ------------------------------------------------------------------------------------

void load_norms(const uint8_t* records, size_t stride, size_t n, bool fp32, float* out) {
  size_t t = 0;
  if (!fp32) {
    // Four fp16 norms per 64-bit integer, built with independent loads and shifts: inserting
    // them one by one into a vector chained eight dependent inserts per 8 tokens (and storing
    // them to a buffer first stalled the vector load on store forwarding).
    const auto four = [&](const uint8_t* p) {
      uint64_t word = 0;
      for (int i = 0; i < 4; ++i) {
        uint16_t h;
        std::memcpy(&h, p + i * stride, sizeof h);
        word |= static_cast<uint64_t>(h) << (16 * i);
      }
      return word;
    };
    for (; t + 8 <= n; t += 8) {
      const uint8_t* p = records + t * stride;
      const __m128i h = _mm_set_epi64x(static_cast<long long>(four(p + 4 * stride)), static_cast<long long>(four(p)));
      _mm256_storeu_ps(out + t, _mm256_cvtph_ps(h));
    }
  }
  for (; t < n; ++t) out[t] = load_norm(records + t * stride, fp32);
}

void scale_scores(float* scores, size_t ld, int rows, size_t n, const float* norm, const float* shift) {
  for (int r = 0; r < rows; ++r) {
    float* s = scores + r * ld;
    const __m256 add = _mm256_set1_ps(shift[r]);
    size_t t = 0;
    for (; t + 8 <= n; t += 8) {
      _mm256_storeu_ps(s + t, _mm256_fmadd_ps(_mm256_loadu_ps(s + t), _mm256_loadu_ps(norm + t), add));
    }
    for (; t < n; ++t) s[t] = std::fma(s[t], norm[t], shift[r]);
  }
}

// ---- online softmax ---------------------------------------------------------------------------

// exp(x) to ~2 ulp for x in [-87, 88] (inputs are clamped there): 2^n * e^r, |r| <= ln2 / 2,
// e^r from its degree-6 Taylor polynomial.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// tanh(y) = sign(y) (1 - e) / (1 + e), e = exp(-2|y|).
inline __m256 tanh8(__m256 y) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 ay = _mm256_andnot_ps(sign_mask, y);
  const __m256 e = exp8(_mm256_mul_ps(ay, _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  return _mm256_or_ps(t, _mm256_and_ps(sign_mask, y));
}

void softmax_update(float* scores, size_t ld, int rows, size_t n, const size_t* visible,
                    const size_t* hidden, float scale, float softcap, float* m, float* l, float* acc,
                    size_t as, size_t acc_width) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 vcap = _mm256_set1_ps(softcap);
  const __m256 vinv_cap = _mm256_set1_ps(softcap > 0.0f ? 1.0f / softcap : 0.0f);
  for (int r = 0; r < rows; ++r) {
    float* s = scores + r * ld;
    const size_t vis = visible[r] < n ? visible[r] : n;
    const size_t hid = hidden == nullptr ? 0 : (hidden[r] < vis ? hidden[r] : vis);
    if (hid == vis) {
      for (size_t t = 0; t < n; ++t) s[t] = 0.0f;
      continue;
    }
    __m256 vmax = _mm256_set1_ps(kNegInf);
    const __m256 neg_inf = _mm256_set1_ps(kNegInf);
    // Whole groups of 8 seen tokens need no mask (a decode step's blocks are all visible); the
    // groups holding the window's start (hid) or the causal end (vis) do.
    const size_t first = hid & ~size_t{7};
    const size_t full = vis & ~size_t{7};
    const auto seen = [&](size_t t) {
      const __m256 from = _mm256_set1_ps(static_cast<float>(static_cast<ptrdiff_t>(hid) - static_cast<ptrdiff_t>(t)));
      const __m256 to = _mm256_set1_ps(static_cast<float>(vis - t));
      return _mm256_and_ps(_mm256_cmp_ps(lane, from, _CMP_GE_OQ), _mm256_cmp_ps(lane, to, _CMP_LT_OQ));
    };
    for (size_t t = first; t < vis; t += 8) {
      __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + t), vscale);
      if (softcap > 0.0f) x = _mm256_mul_ps(vcap, tanh8(_mm256_mul_ps(x, vinv_cap)));
      if (t >= full || t < hid) x = _mm256_blendv_ps(neg_inf, x, seen(t));
      _mm256_storeu_ps(s + t, x);
      vmax = _mm256_max_ps(vmax, x);
    }
    __m128 mx = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    mx = _mm_max_ps(mx, _mm_movehl_ps(mx, mx));
    mx = _mm_max_ss(mx, _mm_shuffle_ps(mx, mx, 1));
    const float block_max = _mm_cvtss_f32(mx);
    const float m_new = m[r] > block_max ? m[r] : block_max;
    const float alpha = softmax_rescale(m[r], m_new);
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 vsum = _mm256_setzero_ps();
    for (size_t t = 0; t < first; ++t) s[t] = 0.0f;
    size_t t = first;
    for (; t < vis; t += 8) {
      __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
      if (t >= full || t < hid) p = _mm256_and_ps(seen(t), p);
      _mm256_storeu_ps(s + t, p);
      vsum = _mm256_add_ps(vsum, p);
    }
    for (; t < n; ++t) s[t] = 0.0f;
    if (alpha != 1.0f) {
      float* a = acc + r * as;
      const __m256 va = _mm256_set1_ps(alpha);
      size_t j = 0;
      for (; j + 8 <= acc_width; j += 8) _mm256_storeu_ps(a + j, _mm256_mul_ps(va, _mm256_loadu_ps(a + j)));
      for (; j < acc_width; ++j) a[j] *= alpha;
    }
    l[r] = l[r] * alpha + hsum(vsum);
    m[r] = m_new;
  }
}

// The VNNI table's prefill kernels: the blocked AVX-512 ones where they take the head dim.
void prefill_dots_f16(const float* q, size_t qs, int rows, const uint16_t* keys, size_t n, int dim,
                      float* scores, size_t ld) {
  if (prefill_avx512_dim(dim)) prefill_kernels_avx512().dots_f16(q, qs, rows, keys, n, dim, scores, ld);
  else dots_f16(q, qs, rows, keys, n, dim, scores, ld);
}
void prefill_dots_f32(const float* q, size_t qs, int rows, const float* keys, size_t n, int dim,
                      float* scores, size_t ld) {
  if (prefill_avx512_dim(dim)) prefill_kernels_avx512().dots_f32(q, qs, rows, keys, n, dim, scores, ld);
  else dots_f32(q, qs, rows, keys, n, dim, scores, ld);
}
void prefill_accumulate_f16(const float* w, size_t ld, int rows, const uint16_t* values, size_t n,
                            int dim, float* acc, size_t as) {
  if (prefill_avx512_dim(dim)) prefill_kernels_avx512().accumulate_f16(w, ld, rows, values, n, dim, acc, as);
  else accumulate_f16(w, ld, rows, values, n, dim, acc, as);
}
void prefill_accumulate_f32(const float* w, size_t ld, int rows, const float* values, size_t n, int dim,
                            float* acc, size_t as) {
  if (prefill_avx512_dim(dim)) prefill_kernels_avx512().accumulate_f32(w, ld, rows, values, n, dim, acc, as);
  else accumulate_f32(w, ld, rows, values, n, dim, acc, as);
}

// The integer kernels come from attention_int8_avx2.cpp, _avx_vnni.cpp or _vnni.cpp; vbmi: the
// VNNI table (AVX-512 BW/VBMI CPUs), which also takes the blocked AVX-512 prefill kernels.
KernelTable make_table(const char* name, const Int8Kernels& int8, bool vbmi) {
  // int8.order: the VNNI build decodes 3-bit codes in another order than the AVX2 one.
  return KernelTable{name,           dots_f16,           dots_f32,
                     accumulate_f16, accumulate_f32,     vbmi ? group_dots8 : group_dots,
                     vbmi ? group_accumulate8 : group_accumulate, softmax_update, load_norms,
                     scale_scores,   kChunkOrder4,   int8.dots,          int8.accumulate,
                     int8.weights,   int8.order,         int8.dots16,
                     int8.accumulate16, int8.weights16,  int8.order16,
                     int8.weight_levels,
                     vbmi ? prefill_dots_f16 : dots_f16, vbmi ? prefill_dots_f32 : dots_f32,
                     vbmi ? prefill_accumulate_f16 : accumulate_f16,
                     vbmi ? prefill_accumulate_f32 : accumulate_f32, group_decode,
                     int8.prefill_dots,  int8.prefill_accumulate};
}

}  // namespace
}  // namespace turbokv::attn

TURBOKV_TARGET_END

namespace turbokv::attn {

const KernelTable* avx2_kernel_table() {
  if (!cpu_has_avx2_fma_f16c()) return nullptr;
  static const KernelTable table = make_table("avx2", int8_kernels_avx2(), false);
  return &table;
}

const KernelTable* avx_vnni_kernel_table() {
  if (!cpu_has_avx_vnni()) return nullptr;
  static const KernelTable table = make_table("avx2+avx-vnni", int8_kernels_avx_vnni(), false);
  return &table;
}

const KernelTable* vnni_kernel_table() {
  if (!cpu_has_avx2_fma_f16c() || !cpu_has_avx512_vnni_vbmi_bw()) return nullptr;
  static const KernelTable table = make_table("avx2+vnni", int8_kernels_vnni(), true);
  return &table;
}

}  // namespace turbokv::attn

#else  // not x86-64 GCC/Clang

namespace turbokv::attn {
const KernelTable* avx2_kernel_table() { return nullptr; }
const KernelTable* avx_vnni_kernel_table() { return nullptr; }
const KernelTable* vnni_kernel_table() { return nullptr; }
}  // namespace turbokv::attn

#endif
