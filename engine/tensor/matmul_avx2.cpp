// AVX2 + FMA + F16C row kernels. Compiled for every x86-64 build through per-function target
// attributes and chosen at run time (avx2_available()), so one binary runs on any x86-64.
// Quantized rows are decoded in registers and multiplied in float: the activations x stay
// exact, so the result differs from the scalar reference only by float summation order.
#include "engine/tensor/matmul_avx2_common.hpp"
#include "engine/tensor/matmul_kernels.hpp"
#include "turbokv/cpu_features.hpp"

#include <cstring>

namespace turbokv::engine::detail {

#if TURBOKV_HAVE_AVX2_KERNELS

namespace {

using avx2::dot32_i8_i8;
using avx2::dot32_u8_i8;
using avx2::dot_f32;
using avx2::hsum;
using avx2::load_half;
using avx2::lane_totals;
using avx2::load_q8_values;
using avx2::prefetch_weights;
using avx2::u8x8_to_float;

TKV_AVX2 inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

TKV_AVX2 inline __m256 load_bf16x8(const uint8_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Eight int8 values (the low 8 bytes of v) as floats.
TKV_AVX2 inline __m256 i8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// Sum over 16 lanes of q[i] * x[i] for 16 int8 q (one __m128i), as a vector of 8 partial sums.
TKV_AVX2 inline __m256 dot16_i8(__m128i q, const float* x) {
  const __m256 a = _mm256_mul_ps(i8x8_to_ps(q), _mm256_loadu_ps(x));
  return _mm256_fmadd_ps(i8x8_to_ps(_mm_srli_si128(q, 8)), _mm256_loadu_ps(x + 8), a);
}

TKV_AVX2 float dot_row_f32(const uint8_t* row, const float* x, int64_t cols) {
  return dot_f32(reinterpret_cast<const float*>(row), x, cols);
}

TKV_AVX2 float dot_row_f16(const uint8_t* row, const float* x, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    acc0 = _mm256_fmadd_ps(load_f16x8(row + 2 * i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(load_f16x8(row + 2 * i + 16), _mm256_loadu_ps(x + i + 8), acc1);
  }
  for (; i + 8 <= cols; i += 8) acc0 = _mm256_fmadd_ps(load_f16x8(row + 2 * i), _mm256_loadu_ps(x + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < cols; ++i) sum += load_half(row + 2 * i) * x[i];
  return sum;
}

TKV_AVX2 float dot_row_bf16(const uint8_t* row, const float* x, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    acc0 = _mm256_fmadd_ps(load_bf16x8(row + 2 * i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(load_bf16x8(row + 2 * i + 16), _mm256_loadu_ps(x + i + 8), acc1);
  }
  for (; i + 8 <= cols; i += 8) acc0 = _mm256_fmadd_ps(load_bf16x8(row + 2 * i), _mm256_loadu_ps(x + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < cols; ++i) {
    uint32_t bits = 0;
    std::memcpy(reinterpret_cast<uint8_t*>(&bits) + 2, row + 2 * i, 2);
    float v;
    std::memcpy(&v, &bits, 4);
    sum += v * x[i];
  }
  return sum;
}

TKV_AVX2 float dot_row_q8_0(const uint8_t* row, const float* x, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t blocks = cols / 32;
  for (int64_t b = 0; b < blocks; ++b, row += 34, x += 32) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 18));
    const __m256 s = _mm256_add_ps(dot16_i8(q0, x), dot16_i8(q1, x + 16));
    const __m256 d = _mm256_set1_ps(load_half(row));
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(d, s, acc1);
    } else {
      acc0 = _mm256_fmadd_ps(d, s, acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

TKV_AVX2 float dot_row_q4_0(const uint8_t* row, const float* x, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m128i low_mask = _mm_set1_epi8(15);
  const __m128i eight = _mm_set1_epi8(8);
  const int64_t blocks = cols / 32;
  for (int64_t b = 0; b < blocks; ++b, row += 18, x += 32) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low_mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask), eight);
    const __m256 s = _mm256_add_ps(dot16_i8(lo, x), dot16_i8(hi, x + 16));
    const __m256 d = _mm256_set1_ps(load_half(row));
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(d, s, acc1);
    } else {
      acc0 = _mm256_fmadd_ps(d, s, acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Sum of q * x and of x over 32 values whose 4-bit codes are the bytes of q32 (0..15).
TKV_AVX2 inline void dot32_u4(__m256i q32, const float* x, __m256& qx, __m256& xs) {
  const __m128i lo = _mm256_castsi256_si128(q32);
  const __m128i hi = _mm256_extracti128_si256(q32, 1);
  const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
  __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), x0);
  __m256 c = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), x1);
  a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), x2, a);
  c = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), x3, c);
  qx = _mm256_add_ps(a, c);
  xs = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
}

// Q4_K's 8 six-bit scales and mins, packed into the 12 bytes at s.
inline void unpack_q4_k_scales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 15) | ((s[j] >> 6) << 4));
    mn[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

// Q6_K: the 6-bit codes (0..63, one per byte) of half `half` (128 values) of the super-block at
// row, as four runs of 32: low 4 bits from ql, high 2 bits from qh.
TKV_AVX2 inline void unpack_q6_k_half(const uint8_t* row, int half, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 64 * half));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 64 * half + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 128 + 32 * half));
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
}

TKV_AVX2 float dot_row_q4_k(const uint8_t* row, const float* x, int64_t cols) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i low_mask = _mm256_set1_epi8(15);
  for (int64_t b = 0; b < cols / 256; ++b, row += 144, x += 256) {
    const float d = load_half(row);
    const float dmin = load_half(row + 2);
    uint8_t sc[8], mn[8];
    unpack_q4_k_scales(row + 4, sc, mn);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 + 32 * chunk));
      const __m256i lo = _mm256_and_si256(q, low_mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask);
      __m256 qx, xs;
      dot32_u4(lo, x + 64 * chunk, qx, xs);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * chunk]), qx, acc);
      acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * mn[2 * chunk]), xs, acc);
      dot32_u4(hi, x + 64 * chunk + 32, qx, xs);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * chunk + 1]), qx, acc);
      acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * mn[2 * chunk + 1]), xs, acc);
    }
  }
  return hsum(acc);
}

TKV_AVX2 float dot_row_q6_k(const uint8_t* row, const float* x, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < cols / 256; ++b, row += 210, x += 256) {
    const float d = load_half(row + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(row + 192);
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      unpack_q6_k_half(row, half, q);
      const int8_t* sc = scales + 8 * half;
      const float* xh = x + 128 * half;
      for (int k = 0; k < 4; ++k) {
        const __m256i v = _mm256_sub_epi8(q[k], bias);
        const __m256 lo = dot16_i8(_mm256_castsi256_si128(v), xh + 32 * k);
        const __m256 hi = dot16_i8(_mm256_extracti128_si256(v, 1), xh + 32 * k + 16);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * k]), lo, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * sc[2 * k + 1]), hi, acc1);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Even blocks into acc0, odd ones into acc1 (matmul_rowwise's kernels keep this order); a pair
// of blocks per step, with one prefetch per 68 bytes.
TKV_AVX2 inline __m256 q8_0_block(__m256 acc, const uint8_t* row, const uint8_t* xq) {
  return _mm256_fmadd_ps(_mm256_set1_ps(load_half(row) * load_half(xq)),
                         dot32_i8_i8(load_q8_values(row), load_q8_values(xq)), acc);
}

TKV_AVX2 float dot_q8_row_q8_0(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t blocks = cols / 32;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2, row += 68, xq += 68) {
    prefetch_weights(row);
    acc0 = q8_0_block(acc0, row, xq);
    acc1 = q8_0_block(acc1, row + 34, xq + 34);
  }
  if (b < blocks) acc0 = q8_0_block(acc0, row, xq);
  return hsum(_mm256_add_ps(acc0, acc1));
}

TKV_AVX2 float dot_q8_row_q4_0(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m128i low_mask = _mm_set1_epi8(15);
  const __m256i eight = _mm256_set1_epi8(8);
  const int64_t blocks = cols / 32;
  for (int64_t b = 0; b < blocks; ++b, row += 18, xq += 34) {
    prefetch_weights(row);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    const __m128i lo = _mm_and_si128(bytes, low_mask);                       // values 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask);  // values 16..31
    const __m256i w = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), eight);
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 2));
    const __m256 d = _mm256_set1_ps(load_half(row) * load_half(xq));
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(d, dot32_i8_i8(w, x), acc1);
    } else {
      acc0 = _mm256_fmadd_ps(d, dot32_i8_i8(w, x), acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Q4_K: sub-block j of a super-block lines up with one Q8_0 block of x, so
// dot = sum_j (d * sc_j) * dx_j * sum(q * xq)_j - sum_j (dmin * m_j) * [dx_j * sum(xq)_j].
// The bracket is the same for every row (x_sum, computed once per activation), so each
// sub-block costs one integer dot product; its eight int32 partial sums are reduced across the
// super-block into one vector (lane j: sub-block j) and scaled there: the float work is two
// multiply-adds per 256 values. N activations share the weight-side work (loads, the 6-bit
// scales); each activation's operations are the same, in the same order, for any N, so
// matmul_rowwise's four-activation pass gives matvec's bits.
template <int N>
TKV_AVX2 inline void dot_q8_q4_k_n(const uint8_t* row, const uint8_t* const* xq, const float* const* x_scale,
                                   const float* const* x_sum, int64_t cols, float* out) {
  __m256 acc[N];
  for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i low_mask = _mm256_set1_epi8(15);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < cols / 256; ++b, row += 144) {
    prefetch_weights(row, 144);
    alignas(8) uint8_t sc[8], mn[8];
    unpack_q4_k_scales(row + 4, sc, mn);
    const __m256 d_sc = _mm256_mul_ps(_mm256_set1_ps(load_half(row)), u8x8_to_float(sc));
    const __m256 min = _mm256_mul_ps(_mm256_set1_ps(load_half(row + 2)), u8x8_to_float(mn));
    for (int t = 0; t < N; ++t) {
      const uint8_t* xb = xq[t] + b * 8 * 34;
      __m256i qx[8];
      for (int chunk = 0; chunk < 4; ++chunk) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 + 32 * chunk));
        const __m256i low = _mm256_and_si256(q, low_mask);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask);
        qx[2 * chunk] = _mm256_madd_epi16(_mm256_maddubs_epi16(low, load_q8_values(xb + 34 * (2 * chunk))), ones16);
        qx[2 * chunk + 1] =
            _mm256_madd_epi16(_mm256_maddubs_epi16(high, load_q8_values(xb + 34 * (2 * chunk + 1))), ones16);
      }
      const __m256 scale = _mm256_mul_ps(d_sc, _mm256_loadu_ps(x_scale[t] + b * 8));
      acc[t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(lane_totals(qx)), acc[t]);
      acc[t] = _mm256_fnmadd_ps(min, _mm256_loadu_ps(x_sum[t] + b * 8), acc[t]);
    }
  }
  for (int t = 0; t < N; ++t) out[t] = hsum(acc[t]);
}

TKV_AVX2 float dot_q8_row_q4_k(const uint8_t* row, const uint8_t* xq, const float* x_scale, const float* x_sum,
                               int64_t cols) {
  float out;
  dot_q8_q4_k_n<1>(row, &xq, &x_scale, &x_sum, cols, &out);
  return out;
}

}  // namespace

TKV_AVX2 void dot_q8_x4_q4_k(const uint8_t* row, const uint8_t* const* xq, const float* const* x_scale,
                             const float* const* x_sum, int64_t cols, float* out) {
  dot_q8_q4_k_n<4>(row, xq, x_scale, x_sum, cols, out);
}

namespace {

// Q6_K: each 32-value run (one Q8_0 block of x) holds two sub-blocks of 16 with their own int8
// scales: the scales ride in the madd that widens the int16 products.
TKV_AVX2 float dot_q8_row_q6_k(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < cols / 256; ++b, row += 210, xq += 8 * 34) {
    prefetch_weights(row, 210);
    const float d = load_half(row + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(row + 192);
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      unpack_q6_k_half(row, half, q);
      const int8_t* sc = scales + 8 * half;
      for (int k = 0; k < 4; ++k) {
        const __m256i v = _mm256_sub_epi8(q[k], bias);  // [-32, 31]
        const uint8_t* xb = xq + 34 * (4 * half + k);
        const __m256i x = load_q8_values(xb);
        const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v));
        const __m256i scale16 = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
        const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(products, scale16));
        const __m256 dd = _mm256_set1_ps(d * load_half(xb));
        if (k & 1) {
          acc1 = _mm256_fmadd_ps(dd, sum, acc1);
        } else {
          acc0 = _mm256_fmadd_ps(dd, sum, acc0);
        }
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

TKV_AVX2 void decode_f16(const uint8_t* row, int64_t cols, float* out) {
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(out + i, load_f16x8(row + 2 * i));
  for (; i < cols; ++i) out[i] = load_half(row + 2 * i);
}

TKV_AVX2 void decode_bf16(const uint8_t* row, int64_t cols, float* out) {
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(out + i, load_bf16x8(row + 2 * i));
  for (; i < cols; ++i) {
    uint32_t bits = 0;
    std::memcpy(reinterpret_cast<uint8_t*>(&bits) + 2, row + 2 * i, 2);
    std::memcpy(out + i, &bits, 4);
  }
}

TKV_AVX2 inline void store_i8x16(__m128i q, __m256 d, float* out) {
  _mm256_storeu_ps(out, _mm256_mul_ps(d, i8x8_to_ps(q)));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(q, 8))));
}

// Q4_K rows decoded for matmul's float tiles: d * sc * q - dmin * m, the scalar decoder's
// multiply and subtract (same values; tests/engine/test_tensor_types.cpp compares them).
TKV_AVX2 void decode_q4_k(const uint8_t* row, int64_t cols, float* out) {
  const __m256i low_mask = _mm256_set1_epi8(15);
  for (int64_t b = 0; b < cols / 256; ++b, row += 144, out += 256) {
    const float d = load_half(row), dmin = load_half(row + 2);
    alignas(8) uint8_t sc[8], mn[8];
    unpack_q4_k_scales(row + 4, sc, mn);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 + 32 * chunk));
      const __m256i nibbles[2] = {_mm256_and_si256(q, low_mask), _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask)};
      for (int part = 0; part < 2; ++part) {
        const int j = 2 * chunk + part;
        const __m256 scale = _mm256_set1_ps(d * static_cast<float>(sc[j]));
        const __m256 min = _mm256_set1_ps(dmin * static_cast<float>(mn[j]));
        alignas(32) uint8_t codes[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(codes), nibbles[part]);
        for (int e = 0; e < 32; e += 8) {
          const __m256 v = u8x8_to_float(codes + e);
          _mm256_storeu_ps(out + 32 * j + e, _mm256_sub_ps(_mm256_mul_ps(scale, v), min));
        }
      }
    }
  }
}

// Q6_K rows: d * (sc * q), the product of two small integers taken exactly, then one multiply,
// as the scalar decoder.
TKV_AVX2 void decode_q6_k(const uint8_t* row, int64_t cols, float* out) {
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < cols / 256; ++b, row += 210, out += 256) {
    const __m256 d = _mm256_set1_ps(load_half(row + 208));
    const auto* scales = reinterpret_cast<const int8_t*>(row + 192);
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      unpack_q6_k_half(row, half, q);
      for (int k = 0; k < 4; ++k) {
        alignas(32) int8_t values[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(values), _mm256_sub_epi8(q[k], bias));
        for (int e = 0; e < 32; e += 8) {
          const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(values + e)));
          const __m256i scaled = _mm256_mullo_epi32(v, _mm256_set1_epi32(scales[8 * half + 2 * k + e / 16]));
          _mm256_storeu_ps(out + 128 * half + 32 * k + e, _mm256_mul_ps(d, _mm256_cvtepi32_ps(scaled)));
        }
      }
    }
  }
}

TKV_AVX2 void decode_q8_0(const uint8_t* row, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, row += 34, out += 32) {
    const __m256 d = _mm256_set1_ps(load_half(row));
    store_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2)), d, out);
    store_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 18)), d, out + 16);
  }
}

TKV_AVX2 void decode_q4_0(const uint8_t* row, int64_t cols, float* out) {
  const __m128i low_mask = _mm_set1_epi8(15);
  const __m128i eight = _mm_set1_epi8(8);
  for (int64_t b = 0; b < cols / 32; ++b, row += 18, out += 32) {
    const __m256 d = _mm256_set1_ps(load_half(row));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    store_i8x16(_mm_sub_epi8(_mm_and_si128(bytes, low_mask), eight), d, out);
    store_i8x16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask), eight), d, out + 16);
  }
}

// Four weight rows against two inputs: each loaded x vector feeds four FMAs and each weight
// vector two, with eight independent accumulators to cover the FMA latency.
TKV_AVX2 void dot4x2(const float* const* w, const float* const* x, int64_t cols, float* out) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x[0] + i), x1 = _mm256_loadu_ps(x[1] + i);
    for (int r = 0; r < 4; ++r) {
      const __m256 wv = _mm256_loadu_ps(w[r] + i);
      acc[2 * r] = _mm256_fmadd_ps(wv, x0, acc[2 * r]);
      acc[2 * r + 1] = _mm256_fmadd_ps(wv, x1, acc[2 * r + 1]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 2; ++t) {
      float sum = hsum(acc[2 * r + t]);
      for (int64_t j = i; j < cols; ++j) sum += w[r][j] * x[t][j];
      out[2 * r + t] = sum;
    }
  }
}

}  // namespace

bool avx2_available() { return cpu_has_avx2_fma_f16c(); }

RowKernels avx2_kernels(GgmlType type) {
  RowKernels k = scalar_kernels(type);  // decoders without an AVX2 version stay scalar
  k.dot4x2 = &dot4x2;
  k.dot_f32 = &dot_f32;
  switch (type) {
    case GgmlType::F32: k.dot = &dot_row_f32; break;
    case GgmlType::F16: k.dot = &dot_row_f16; k.decode = &decode_f16; break;
    case GgmlType::BF16: k.dot = &dot_row_bf16; k.decode = &decode_bf16; break;
    case GgmlType::Q8_0:
      k.dot = &dot_row_q8_0;
      k.dot_q8 = &dot_q8_row_q8_0;
      k.decode = &decode_q8_0;
      break;
    case GgmlType::Q4_0:
      k.dot = &dot_row_q4_0;
      k.dot_q8 = &dot_q8_row_q4_0;
      k.decode = &decode_q4_0;
      break;
    case GgmlType::Q4_K:
      k.dot = &dot_row_q4_k;
      k.dot_q8_sums = &dot_q8_row_q4_k;
      k.decode = &decode_q4_k;
      break;
    case GgmlType::Q6_K:
      k.dot = &dot_row_q6_k;
      k.dot_q8 = &dot_q8_row_q6_k;
      k.decode = &decode_q6_k;
      break;
    default: add_avx2_quant_kernels(type, k); break;  // matmul_avx2_quants.cpp
  }
  return k;
}

#else  // no x86-64: the scalar kernels are all there is

bool avx2_available() { return false; }
RowKernels avx2_kernels(GgmlType type) { return scalar_kernels(type); }
// Without AVX2 kernels matmul_rowwise never takes the four-activation path.
void dot_q8_x4_q4_k(const uint8_t*, const uint8_t* const*, const float* const*, const float* const*, int64_t,
                    float*) {}

#endif

}  // namespace turbokv::engine::detail
