// matvec's Q8_0 kernel on 512-bit vectors with AVX512-VNNI: a block pair per step, for CPUs that
// have it (chosen at run time; TURBOKV_NO_AVX512 turns it off). One activation for matvec; up to
// four for matmul_rowwise's batches below the tile kernel's 8 (the server's small steps), each
// loaded weight pair feeding all of them.
//
// Why: decode reads every weight once per token, and a kernel's rate is set by how many loads it
// keeps in flight, i.e. by how few instructions it spends per byte. The AVX2 kernel
// (dot_q8_row_q8_0) spends ~13 per 34-byte block; this one ~9 per 68-byte pair (the Q8_0 matvec
// of the 1B-shaped model read ~20 GB/s with the AVX2 kernel, ~22.5 with this one, where a plain
// read of the same mapping reached ~23; docs/history/benchmarks-notebook.md, "Decode matvec,
// batched steps and llama.cpp on this VM").
//
// Same bits as dot_q8_row_q8_0: that kernel keeps an even-block and an odd-block accumulator of
// eight float lanes, each block adding (dw * dx) * (its eight int32 sums of four products) with
// one fused multiply-add, and returns hsum(even + odd). Here the low 256 bits of the accumulator
// are the even one and the high 256 bits the odd one, as in the AVX-512 tile kernel
// (matmul_rowwise_avx512.cpp); the integer sums are exact either way and dw * dx is the same IEEE
// product. An odd last block runs on the low half alone with the same operations.
//
// vpdpbusd multiplies unsigned by signed bytes: the weights are flipped to w + 128 (XOR 0x80),
// the activation stays signed, and each group of four starts at -128 * (sum of its four
// activation values), packed once per call with the activation:
// sum((w + 128) * x) - 128 * sum(x) = sum(w * x).
#include <algorithm>
#include <vector>

#include "engine/tensor/matmul_avx2_common.hpp"
#include "engine/tensor/matmul_kernels.hpp"
#include "turbokv/thread_pool.hpp"

#if TURBOKV_HAVE_AVX2_KERNELS
// GCC 12's AVX-512 intrinsics pass an undefined vector as the unused merge source, which
// -Wmaybe-uninitialized (and -Wuninitialized, for the 64x4 extract) reports at every use (GCC
// bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define TKV_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace turbokv::engine::detail {

namespace {

// [low | high] as one 512-bit vector (AVX512F only; the 32x8 insert would need AVX512DQ).
TKV_AVX512 inline __m512 halves(__m256 low, __m256 high) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(low)), _mm256_castps_pd(high), 1));
}

// One activation's Q8_0 block pair: 64 values (a missing odd last block as zeros), each group of
// four's start sum -128 * (its sum), and the two blocks' scales broadcast to eight lanes each.
struct alignas(64) ActivationPair {
  int8_t values[64];
  int32_t start[16];
  float scale[16];
};

// xq: one Q8_0 row of cols values, packed as (cols / 32 + 1) / 2 pairs.
TKV_AVX512 void pack_activation(const uint8_t* xq, int64_t cols, std::vector<ActivationPair>& out) {
  const size_t blocks = static_cast<size_t>(cols) / 32;
  out.resize((blocks + 1) / 2);
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  for (size_t p = 0; p < out.size(); ++p) {
    ActivationPair& dst = out[p];
    for (size_t half = 0; half < 2; ++half) {
      const size_t b = 2 * p + half;
      __m256i values = _mm256_setzero_si256();
      __m256 scale = _mm256_setzero_ps();
      if (b < blocks) {
        values = avx2::load_q8_values(xq + b * 34);
        scale = _mm256_set1_ps(avx2::load_half(xq + b * 34));
      }
      // -128 * (sum of each group of four values): vpdpbusd of 128 (unsigned) by the values.
      const __m256i offset_sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, values);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst.values + 32 * half), values);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst.start + 8 * half),
                         _mm256_sub_epi32(_mm256_setzero_si256(), offset_sums));
      _mm256_store_ps(dst.scale + 8 * half, scale);
    }
  }
}

// N activations (1 to 4) against one row, the row's pair loaded once for all.
template <int N>
TKV_AVX512 inline void dot_q8_0_n(const uint8_t* row, const ActivationPair* const* x, int64_t cols, float* out) {
  const int64_t blocks = cols / 32;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
  int64_t b = 0;
  size_t p = 0;
  for (; b + 2 <= blocks; b += 2, row += 68, ++p) {
    avx2::prefetch_weights(row);
    const __m256i w0 = avx2::load_q8_values(row);
    const __m256i w1 = avx2::load_q8_values(row + 34);
    const __m512i w = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1), flip);
    const __m512 dw = halves(_mm256_set1_ps(avx2::load_half(row)), _mm256_set1_ps(avx2::load_half(row + 34)));
#pragma GCC unroll 4
    for (int t = 0; t < N; ++t) {
      const ActivationPair& xp = x[t][p];
      const __m512i sums = _mm512_dpbusd_epi32(_mm512_load_si512(xp.start), w, _mm512_load_si512(xp.values));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_load_ps(xp.scale)), _mm512_cvtepi32_ps(sums), acc[t]);
    }
  }
  const bool tail = b < blocks;  // an odd count: the last, even block on the low halves
  const __m256i w_tail =
      tail ? _mm256_xor_si256(avx2::load_q8_values(row), _mm256_set1_epi8(static_cast<char>(0x80))) : _mm256_setzero_si256();
  const __m256 dw_tail = _mm256_set1_ps(tail ? avx2::load_half(row) : 0.0f);
  for (int t = 0; t < N; ++t) {
    __m256 even = _mm512_castps512_ps256(acc[t]);
    const __m256 odd = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1));
    if (tail) {
      const ActivationPair& xp = x[t][p];
      const __m256i sums = _mm256_dpbusd_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(xp.start)), w_tail,
                                               _mm256_load_si256(reinterpret_cast<const __m256i*>(xp.values)));
      even = _mm256_fmadd_ps(_mm256_mul_ps(dw_tail, _mm256_load_ps(xp.scale)), _mm256_cvtepi32_ps(sums), even);
    }
    out[t] = avx2::hsum(_mm256_add_ps(even, odd));
  }
}

// A row against n activations, four at a time.
TKV_AVX512 void row_against(const uint8_t* row, const ActivationPair* const* x, size_t n, int64_t cols, float* y,
                            size_t y_stride) {
  for (size_t t = 0; t < n; t += 4) {
    float out[4];
    const size_t here = std::min<size_t>(4, n - t);
    switch (here) {
      case 1: dot_q8_0_n<1>(row, x + t, cols, out); break;
      case 2: dot_q8_0_n<2>(row, x + t, cols, out); break;
      case 3: dot_q8_0_n<3>(row, x + t, cols, out); break;
      default: dot_q8_0_n<4>(row, x + t, cols, out); break;
    }
    for (size_t i = 0; i < here; ++i) y[(t + i) * y_stride] = out[i];
  }
}

}  // namespace

TKV_AVX512 void matvec_q8_0_avx512(const uint8_t* w, size_t w_stride, size_t rows, int64_t cols, const uint8_t* xq,
                                   size_t xq_stride, size_t n, float* y, ThreadPool& pool, size_t min_chunk) {
  thread_local std::vector<std::vector<ActivationPair>> packed;
  packed.resize(n);
  std::vector<const ActivationPair*> x(n);
  for (size_t t = 0; t < n; ++t) {
    pack_activation(xq + t * xq_stride, cols, packed[t]);
    x[t] = packed[t].data();  // the pool's threads read the caller's copy
  }
  pool.parallel_for(
      rows,
      [&](size_t begin, size_t end) {
        for (size_t r = begin; r < end; ++r) row_against(w + r * w_stride, x.data(), n, cols, y + r, rows);
      },
      min_chunk);
}

}  // namespace turbokv::engine::detail

#else

namespace turbokv::engine::detail {
void matvec_q8_0_avx512(const uint8_t*, size_t, size_t, int64_t, const uint8_t*, size_t, size_t, float*, ThreadPool&,
                        size_t) {}
}  // namespace turbokv::engine::detail

#endif
