// The batched (matmul_rowwise) form of the Q8_0 x Q8_0 row kernel: one weight row against four
// quantized activation rows at once, so each block of weights is loaded and its sign taken once
// for the four. Each of the four results is computed with exactly the operations, in exactly
// the order, of dot_q8_row_q8_0 (matmul_avx2.cpp) on that activation alone — so batching
// changes no bit of any row (tests/engine/test_batch_forward.cpp checks it against matvec).
#include "engine/tensor/matmul_kernels.hpp"

#include "engine/tensor/matmul_avx2_common.hpp"

#if TURBOKV_HAVE_AVX2_KERNELS

namespace turbokv::engine::detail {

using avx2::hsum;
using avx2::prefetch_weights;
using avx2::load_half;

namespace {

// One block's contribution for one activation: acc += (dw * dx) * sum_i |w_i| * (x_i sign w_i),
// the exact operations of dot32_i8_i8 and the fmadd in dot_q8_row_q8_0. dw arrives broadcast
// (once per block for the four activations) and dx is broadcast straight from memory, so the
// scale costs one vector multiply per activation (the same IEEE product as the scalar one).
TKV_AVX2 inline __m256 block_step(__m256 acc, __m256i w_abs, __m256i w, const uint8_t* xb, __m256 dw,
                                  const float* dx) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
  const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx));
  const __m256i products = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
  return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_madd_epi16(products, _mm256_set1_epi16(1))), acc);
}

// Block `blk` of the weight row against the same block of all four activations, into c0..c3.
TKV_AVX2 inline void block_x4(const uint8_t* row, int64_t blk, const uint8_t* const* xq, const float* const* xscale,
                              __m256& c0, __m256& c1, __m256& c2, __m256& c3) {
  const size_t o = static_cast<size_t>(blk) * 34;
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + o + 2));
  const __m256i w_abs = _mm256_sign_epi8(w, w);
  const __m256 dw = _mm256_set1_ps(load_half(row + o));
  c0 = block_step(c0, w_abs, w, xq[0] + o, dw, xscale[0] + blk);
  c1 = block_step(c1, w_abs, w, xq[1] + o, dw, xscale[1] + blk);
  c2 = block_step(c2, w_abs, w, xq[2] + o, dw, xscale[2] + blk);
  c3 = block_step(c3, w_abs, w, xq[3] + o, dw, xscale[3] + blk);
}

}  // namespace

TKV_AVX2 void dot_q8_x4_q8_0(const uint8_t* row, const uint8_t* const* xq, const float* const* xscale, int64_t cols,
                             float* out) {
  // Even blocks accumulate into a*, odd ones into b*, as the single-activation kernel does; the
  // accumulators are named registers (an array indexed by b & 1 would live in memory).
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  const int64_t blocks = cols / 32;
  int64_t blk = 0;
  for (; blk + 2 <= blocks; blk += 2) {
    prefetch_weights(row + blk * 34);
    block_x4(row, blk, xq, xscale, a0, a1, a2, a3);
    block_x4(row, blk + 1, xq, xscale, b0, b1, b2, b3);
  }
  if (blk < blocks) block_x4(row, blk, xq, xscale, a0, a1, a2, a3);  // an odd count: the last, even block
  out[0] = hsum(_mm256_add_ps(a0, b0));
  out[1] = hsum(_mm256_add_ps(a1, b1));
  out[2] = hsum(_mm256_add_ps(a2, b2));
  out[3] = hsum(_mm256_add_ps(a3, b3));
}

}  // namespace turbokv::engine::detail

#else

namespace turbokv::engine::detail {
// Without AVX2 kernels matmul_rowwise never takes the 4-activation path (kernel_isa() is "scalar").
void dot_q8_x4_q8_0(const uint8_t*, const uint8_t* const*, const float* const*, int64_t, float*) {}
}  // namespace turbokv::engine::detail

#endif
