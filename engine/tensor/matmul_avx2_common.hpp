// Internal: AVX2 helpers shared by the kernel files (matmul_avx2*.cpp, matmul_rowwise_*.cpp,
// matvec_q8_0_avx512.cpp, quantize_q8_0_avx2.cpp).
// Every function carries the target attribute, so these files build for baseline x86-64 and
// the kernels are only called after avx2_available().
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TURBOKV_HAVE_AVX2_KERNELS 1
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#if TURBOKV_HAVE_AVX2_KERNELS

#define TKV_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace turbokv::engine::detail::avx2 {

TKV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TKV_AVX2 inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Weight rows are read from memory once per token, and on the machines measured the hardware
// prefetchers alone keep too few lines in flight for these kernels: the Q8_0 matvec read 12.5
// GB/s where a plain 2-thread read reaches 23 (its ~13 instructions per 34-byte block fill the
// out-of-order window long before many loads are outstanding). A software prefetch this far ahead
// of the read position, one per 64 bytes or so consumed, brought it to 20.5 GB/s (docs/history/
// benchmarks-notebook.md, "Decode matvec, batched steps and llama.cpp on this VM"). The distance:
// on that Intel Xeon 2-8 KiB ahead measured alike; on a Zen 5, which streams faster, 8 KiB read
// ~6% faster than 4 KiB (docs/data/issue29/avx2-tiles/matvec-bandwidth.cpp). Reading past a
// matrix's end is harmless: a prefetch never faults and changes no result.
inline constexpr size_t kWeightPrefetchBytes = 8192;

TKV_AVX2 inline void prefetch_weights(const uint8_t* at) {
  _mm_prefetch(reinterpret_cast<const char*>(at) + kWeightPrefetchBytes, _MM_HINT_T0);
}

// The same for a super-block of `bytes` bytes: one prefetch per cache line it spans.
TKV_AVX2 inline void prefetch_weights(const uint8_t* at, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) prefetch_weights(at + i);
}

TKV_AVX2 inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Sum over 32 lanes of w[i] * x[i] for int8 w and x, as 8 int32 partial sums converted to
// float. maddubs needs an unsigned operand: |w| with w's sign moved onto x.
TKV_AVX2 inline __m256 dot32_i8_i8(__m256i w, __m256i x) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(products, _mm256_set1_epi16(1)));
}

// Sum of u[i] * x[i] over 32 lanes, u unsigned (at most 127), x int8: 8 int32 partial sums.
TKV_AVX2 inline __m256i dot32_u8_i8(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

// Eight vectors of 8 int32 partial sums -> one vector whose lane j is the total of v[j] (pairs
// added within 128-bit halves, then the halves added).
TKV_AVX2 inline __m256i lane_totals(const __m256i v[8]) {
  const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
}

// Eight unsigned bytes as eight floats.
TKV_AVX2 inline __m256 u8x8_to_float(const uint8_t* v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v))));
}

// The 32 int8 values of a Q8_0 block (after its fp16 scale).
TKV_AVX2 inline __m256i load_q8_values(const uint8_t* block) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
}

}  // namespace turbokv::engine::detail::avx2

#endif
