// The batched (matmul_rowwise) form of the Q8_0 x Q8_0 row kernel: one weight row against four
// quantized activation rows at once, so each block of weights is loaded and its sign taken once
// for the four. Each of the four results is computed with exactly the operations, in exactly
// the order, of dot_q8_row_q8_0 (matmul_avx2.cpp) on that activation alone — so batching
// changes no bit of any row (tests/test_batch_forward.cpp checks it against matvec).
#include "engine/matmul_kernels.hpp"

#include "engine/matmul_avx2_common.hpp"

#if TURBOKV_HAVE_AVX2_KERNELS

namespace turbokv::engine::detail {

using avx2::hsum;
using avx2::load_half;

TKV_AVX2 void dot_q8_x4_q8_0(const uint8_t* row, const uint8_t* const* xq, int64_t cols, float* out) {
  __m256 acc[4][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
  const int64_t blocks = cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = row + b * 34;
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2));
    const __m256i w_abs = _mm256_sign_epi8(w, w);
    const float dw = load_half(wb);
    for (int t = 0; t < 4; ++t) {
      const uint8_t* xb = xq[t] + b * 34;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
      const __m256 d = _mm256_set1_ps(dw * load_half(xb));
      const __m256i products = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
      const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(products, ones));
      acc[t][b & 1] = _mm256_fmadd_ps(d, dot, acc[t][b & 1]);
    }
  }
  for (int t = 0; t < 4; ++t) out[t] = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
}

}  // namespace turbokv::engine::detail

#endif
