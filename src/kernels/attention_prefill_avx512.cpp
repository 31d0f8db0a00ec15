// Blocked AVX-512 kernels for a prefill tile (many query rows of one kv head against one block
// of keys): the KernelTable::prefill_* entries of the VNNI table (whose CPUs have AVX-512F/BW).
//
// Scores as a small matrix product: the block's keys are converted to float and transposed, 32
// tokens at a time, into kt[j][t] (16x16 register transposes), so a score row is 2 vectors of 32
// tokens and each step j is one broadcast of q[r][j] and two FMAs per row: no horizontal sums,
// and each key load feeds up to 12 rows. Values: the block is converted to float rows once, and
// acc[r][j..j+63] (4 vectors per row, 6 rows) is updated token by token with a broadcast weight.
// Every score and accumulator lane is one fused multiply-add chain in the order of j (scores)
// or t (values), which is exactly the scalar table's prefill reference, so results are bit
// for bit the scalar table's.
#include <cstddef>
#include <cstdint>

#include "attention/attention_kernels.hpp"
#include "kernels/attention_prefill_kernels.hpp"
#include "turbokv/cpu_features.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// (and, at -O1, -Wuninitialized for transpose16's unpacks) reports at every use (GCC bug 105593,
// fixed in 13); nothing here reads an undefined value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

TURBOKV_TARGET_BEGIN("avx512f,avx512bw,f16c,fma")

namespace turbokv::attn {
namespace {

constexpr int kSlab = 32;  // tokens per transposed slab (two vectors)

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// r[i] = row i of a 16x16 block in, column i out.
inline void transpose16(__m512* r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c]: column c (mod 4) of each 128-bit lane, rows 4g..4g+3.
  for (int g = 0; g < 4; ++g) {
    const __m512 lo_a = t[4 * g], hi_a = t[4 * g + 1], lo_b = t[4 * g + 2], hi_b = t[4 * g + 3];
    u[4 * g + 0] = _mm512_shuffle_ps(lo_a, lo_b, 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(lo_a, lo_b, 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(hi_a, hi_b, 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(hi_a, hi_b, 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

// kt[j * kSlab + t] = key t0 + t, dim j, for t < m (zero for m <= t < kSlab).
template <typename Key>
void transpose_slab(const Key* keys, size_t m, int dim, float* kt) {
  for (int half = 0; half < 2; ++half) {
    for (int j0 = 0; j0 < dim; j0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const size_t t = static_cast<size_t>(half) * 16 + i;
        r[i] = t < m ? load16(keys + t * dim + j0) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_store_ps(kt + (j0 + i) * kSlab + half * 16, r[i]);
    }
  }
}

template <int R>
void dots_rows(const float* q, size_t qs, const float* kt, int dim, float* scores, size_t ld,
               __mmask16 mask0, __mmask16 mask1) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int j = 0; j < dim; ++j) {
    const __m512 k0 = _mm512_load_ps(kt + j * kSlab), k1 = _mm512_load_ps(kt + j * kSlab + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * qs + j]);
      acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(scores + r * ld, mask0, acc[r][0]);
    _mm512_mask_storeu_ps(scores + r * ld + 16, mask1, acc[r][1]);
  }
}

constexpr int kDotRows = 12;

template <typename Key>
void blocked_dots(const float* q, size_t qs, int rows, const Key* keys, size_t n, int dim,
                  float* scores, size_t ld) {
  alignas(64) float kt[kPrefillMaxDim * kSlab];
  for (size_t t0 = 0; t0 < n; t0 += kSlab) {
    const size_t m = n - t0 < kSlab ? n - t0 : kSlab;
    transpose_slab(keys + t0 * dim, m, dim, kt);
    const __mmask16 mask0 = m >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << m) - 1u);
    const __mmask16 mask1 = m >= 32 ? 0xFFFF : m <= 16 ? 0 : static_cast<__mmask16>((1u << (m - 16)) - 1u);
    for (int r = 0; r < rows; r += kDotRows) {
      const int left = rows - r < kDotRows ? rows - r : kDotRows;
      const float* qr = q + r * qs;
      float* sr = scores + r * ld + t0;
      switch (left) {
#define TURBOKV_ROWS(N) \
  case N: dots_rows<N>(qr, qs, kt, dim, sr, ld, mask0, mask1); break;
        TURBOKV_ROWS(12) TURBOKV_ROWS(11) TURBOKV_ROWS(10) TURBOKV_ROWS(9) TURBOKV_ROWS(8) TURBOKV_ROWS(7)
        TURBOKV_ROWS(6) TURBOKV_ROWS(5) TURBOKV_ROWS(4) TURBOKV_ROWS(3) TURBOKV_ROWS(2)
        default: dots_rows<1>(qr, qs, kt, dim, sr, ld, mask0, mask1); break;
#undef TURBOKV_ROWS
      }
    }
  }
}

// acc rows r < R, V vectors of dims j0.. (V <= 4), += sum_t w[r][t] * v[t][j0..].
template <int R, int V>
void accumulate_rows(const float* w, size_t ld, const float* v, size_t n, int dim, int j0, float* acc,
                     size_t as) {
  __m512 a[R][V];
  for (int r = 0; r < R; ++r) {
    for (int u = 0; u < V; ++u) a[r][u] = _mm512_loadu_ps(acc + r * as + j0 + 16 * u);
  }
  for (size_t t = 0; t < n; ++t) {
    __m512 x[V];
    for (int u = 0; u < V; ++u) x[u] = _mm512_load_ps(v + t * dim + j0 + 16 * u);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = _mm512_set1_ps(w[r * ld + t]);
      for (int u = 0; u < V; ++u) a[r][u] = _mm512_fmadd_ps(wv, x[u], a[r][u]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int u = 0; u < V; ++u) _mm512_storeu_ps(acc + r * as + j0 + 16 * u, a[r][u]);
  }
}

constexpr int kAccRows = 6;

template <int V>
void accumulate_columns(const float* w, size_t ld, int rows, const float* v, size_t n, int dim, int j0,
                        float* acc, size_t as) {
  for (int r = 0; r < rows; r += kAccRows) {
    const int left = rows - r < kAccRows ? rows - r : kAccRows;
    const float* wr = w + r * ld;
    float* ar = acc + r * as;
    switch (left) {
      case 6: accumulate_rows<6, V>(wr, ld, v, n, dim, j0, ar, as); break;
      case 5: accumulate_rows<5, V>(wr, ld, v, n, dim, j0, ar, as); break;
      case 4: accumulate_rows<4, V>(wr, ld, v, n, dim, j0, ar, as); break;
      case 3: accumulate_rows<3, V>(wr, ld, v, n, dim, j0, ar, as); break;
      case 2: accumulate_rows<2, V>(wr, ld, v, n, dim, j0, ar, as); break;
      default: accumulate_rows<1, V>(wr, ld, v, n, dim, j0, ar, as); break;
    }
  }
}

template <typename Value>
void blocked_accumulate(const float* w, size_t ld, int rows, const Value* values, size_t n, int dim,
                        float* acc, size_t as) {
  alignas(64) float v[kBlockTokens * kPrefillMaxDim];
  for (size_t t = 0; t < n; ++t) {
    for (int j = 0; j < dim; j += 16) _mm512_store_ps(v + t * dim + j, load16(values + t * dim + j));
  }
  int j0 = 0;
  for (; j0 + 64 <= dim; j0 += 64) accumulate_columns<4>(w, ld, rows, v, n, dim, j0, acc, as);
  switch ((dim - j0) / 16) {
    case 3: accumulate_columns<3>(w, ld, rows, v, n, dim, j0, acc, as); break;
    case 2: accumulate_columns<2>(w, ld, rows, v, n, dim, j0, acc, as); break;
    case 1: accumulate_columns<1>(w, ld, rows, v, n, dim, j0, acc, as); break;
    default: break;
  }
}

void dots_f16(const float* q, size_t qs, int rows, const uint16_t* keys, size_t n, int dim, float* scores,
              size_t ld) {
  blocked_dots(q, qs, rows, keys, n, dim, scores, ld);
}
void dots_f32(const float* q, size_t qs, int rows, const float* keys, size_t n, int dim, float* scores,
              size_t ld) {
  blocked_dots(q, qs, rows, keys, n, dim, scores, ld);
}
void accumulate_f16(const float* w, size_t ld, int rows, const uint16_t* values, size_t n, int dim, float* acc,
                    size_t as) {
  blocked_accumulate(w, ld, rows, values, n, dim, acc, as);
}
void accumulate_f32(const float* w, size_t ld, int rows, const float* values, size_t n, int dim, float* acc,
                    size_t as) {
  blocked_accumulate(w, ld, rows, values, n, dim, acc, as);
}

}  // namespace

const PrefillKernels& prefill_kernels_avx512() {
  static const PrefillKernels kernels{dots_f16, dots_f32, accumulate_f16, accumulate_f32};
  return kernels;
}

}  // namespace turbokv::attn

TURBOKV_TARGET_END

#endif
