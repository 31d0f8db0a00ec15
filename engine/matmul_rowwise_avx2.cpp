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

namespace {

// One block's contribution for one activation: acc += (dw * dx) * sum_i |w_i| * (x_i sign w_i),
// the exact operations of dot32_i8_i8 and the fmadd in dot_q8_row_q8_0.
// dx: the block's fp16 scale already in float (the conversion is exact, so dw * dx is the same
// product the single-activation kernel forms).
TKV_AVX2 inline __m256 block_step(__m256 acc, __m256i w_abs, __m256i w, const uint8_t* xb, float dw, float dx) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
  const __m256 d = _mm256_set1_ps(dw * dx);
  const __m256i products = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
  return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_madd_epi16(products, _mm256_set1_epi16(1))), acc);
}

}  // namespace

TKV_AVX2 void dot_q8_x4_q8_0(const uint8_t* row, const uint8_t* const* xq, const float* const* xscale, int64_t cols,
                             float* out) {
  // Even blocks accumulate into a*, odd ones into b*, as the single-activation kernel does; the
  // accumulators are named registers (an array indexed by b & 1 would live in memory).
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  const uint8_t *x0 = xq[0], *x1 = xq[1], *x2 = xq[2], *x3 = xq[3];
  const float *s0 = xscale[0], *s1 = xscale[1], *s2 = xscale[2], *s3 = xscale[3];
  const int64_t blocks = cols / 32;
  int64_t blk = 0;
  for (; blk + 2 <= blocks; blk += 2) {
    const size_t o = static_cast<size_t>(blk) * 34;
    {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + o + 2));
      const __m256i w_abs = _mm256_sign_epi8(w, w);
      const float dw = load_half(row + o);
      a0 = block_step(a0, w_abs, w, x0 + o, dw, s0[blk]);
      a1 = block_step(a1, w_abs, w, x1 + o, dw, s1[blk]);
      a2 = block_step(a2, w_abs, w, x2 + o, dw, s2[blk]);
      a3 = block_step(a3, w_abs, w, x3 + o, dw, s3[blk]);
    }
    {
      const size_t p = o + 34;
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p + 2));
      const __m256i w_abs = _mm256_sign_epi8(w, w);
      const float dw = load_half(row + p);
      b0 = block_step(b0, w_abs, w, x0 + p, dw, s0[blk + 1]);
      b1 = block_step(b1, w_abs, w, x1 + p, dw, s1[blk + 1]);
      b2 = block_step(b2, w_abs, w, x2 + p, dw, s2[blk + 1]);
      b3 = block_step(b3, w_abs, w, x3 + p, dw, s3[blk + 1]);
    }
  }
  if (blk < blocks) {  // an odd count: the last (even-numbered) block
    const size_t o = static_cast<size_t>(blk) * 34;
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + o + 2));
    const __m256i w_abs = _mm256_sign_epi8(w, w);
    const float dw = load_half(row + o);
    a0 = block_step(a0, w_abs, w, x0 + o, dw, s0[blk]);
    a1 = block_step(a1, w_abs, w, x1 + o, dw, s1[blk]);
    a2 = block_step(a2, w_abs, w, x2 + o, dw, s2[blk]);
    a3 = block_step(a3, w_abs, w, x3 + o, dw, s3[blk]);
  }
  out[0] = hsum(_mm256_add_ps(a0, b0));
  out[1] = hsum(_mm256_add_ps(a1, b1));
  out[2] = hsum(_mm256_add_ps(a2, b2));
  out[3] = hsum(_mm256_add_ps(a3, b3));
}

}  // namespace turbokv::engine::detail

#endif
