// Activation rows to Q8_0 with AVX2, bit for bit quantize_q8_0 (tensor_types.cpp): matvec and
// matmul_rowwise quantize every activation row on the calling thread before the product, and
// the scalar loop (nearbyint, fmax, fmin calls per value) was a tenth of a prefill's time.
//
// Why the bits are the same: the block maximum of |x| is exact in any order, and max_ps(|x|, m)
// keeps m when x is NaN as std::max(m, |x|) does; d, 1/d and the fp16 scale are computed by the
// same scalar code; x * inv is the same product; round_ps to nearest-even is nearbyint in the
// default rounding mode; max_ps(q, -127) returns -127 for a NaN q as fmax does, then min_ps
// clamps at 127 as fmin; and the conversion of an integer-valued float in [-127, 127] is exact.
#include "engine/tensor/matmul_kernels.hpp"

#include "engine/tensor/matmul_avx2_common.hpp"
#include "turbokv/half.hpp"

#if TURBOKV_HAVE_AVX2_KERNELS

namespace turbokv::engine::detail {

TKV_AVX2 void quantize_row_q8_0_avx2(const float* x, int64_t cols, uint8_t* dst) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 low = _mm256_set1_ps(-127.0f), high = _mm256_set1_ps(127.0f);
  // packs work within 128-bit halves: this puts the four groups of eight bytes back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < cols / 32; ++b, x += 32, dst += 34) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[i]), amax);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    const uint16_t scale = float_to_half(d);
    std::memcpy(dst, &scale, 2);
    const __m256 inv_v = _mm256_set1_ps(inv);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], inv_v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, low), high));
    }
    const __m256i words = _mm256_packs_epi32(q[0], q[1]);     // 0-3 8-11 | 4-7 12-15 (as words)
    const __m256i words2 = _mm256_packs_epi32(q[2], q[3]);    // 16-19 24-27 | 20-23 28-31
    const __m256i bytes = _mm256_packs_epi16(words, words2);  // 0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2), _mm256_permutevar8x32_epi32(bytes, order));
  }
}

}  // namespace turbokv::engine::detail

#else

namespace turbokv::engine::detail {
void quantize_row_q8_0_avx2(const float*, int64_t, uint8_t*) {}
}  // namespace turbokv::engine::detail

#endif
