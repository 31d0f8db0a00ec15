// AVX2 row kernels of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K and IQ4_XS.
//
// The Q8_0-activation dots (dot_q8) carry the speed: every one of these types has sub-blocks of
// 16 or 32 that line up with x's Q8_0 blocks of 32, so each block is one or two integer dot
// products (maddubs/madd) and one float multiply-add by the product of the scales, as for
// Q4_0/Q4_K. The row decoders (batched prefill) widen the same codes to float and apply the
// scales; the float-activation dots (only used with set_q8_activations(false)) decode the row
// that way and take an AVX2 float dot: simple, and off the default path.
#include <vector>

#include "engine/tensor/matmul_avx2_common.hpp"
#include "engine/tensor/matmul_kernels.hpp"
#include "engine/tensor/quant_codecs.hpp"

namespace turbokv::engine::detail {

#if TURBOKV_HAVE_AVX2_KERNELS

namespace {

using avx2::dot32_i8_i8;
using avx2::dot32_u8_i8;
using avx2::hsum;
using avx2::load_half;
using avx2::lane_totals;
using avx2::load_q8_values;
using avx2::prefetch_weights;
using avx2::u8x8_to_float;

// 16 bytes of nibbles as 32 codes in Q4_0 order: low nibbles (values 0..15) in the low lane,
// high nibbles (values 16..31) in the high lane.
TKV_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low_mask = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask), _mm_and_si128(bytes, low_mask));
}

// Byte i = 16 where bit i of the little-endian word at p is set, else 0: Q5's fifth bits.
TKV_AVX2 inline __m256i q5_high_bits(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  // Byte i takes byte i / 8 of qh (the shuffle stays inside each 128-bit lane, and every
  // 32-bit element holds all of qh), then tests bit i % 8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// IQ4_NL's table in both lanes, for a 16-entry byte lookup (pshufb).
TKV_AVX2 inline __m256i iq4nl_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
}

// Q4_1 / Q5_1: x = d * code + m, so dot = d * dx * sum(code * xq) + m * [dx * sum(xq)], the
// bracket computed once per activation block (x_sum).
template <bool kFiveBit>
TKV_AVX2 float dot_q8_with_min(const uint8_t* row, const uint8_t* xq, const float* x_scale, const float* x_sum,
                               int64_t cols) {
  constexpr int kBytes = kFiveBit ? 24 : 20;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float min_total = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b, row += kBytes, xq += 34) {
    prefetch_weights(row);
    __m256i codes = unpack_nibbles(row + (kFiveBit ? 8 : 4));
    if constexpr (kFiveBit) codes = _mm256_or_si256(codes, q5_high_bits(row + 4));
    const __m256 qx = _mm256_cvtepi32_ps(dot32_u8_i8(codes, load_q8_values(xq)));
    const __m256 d = _mm256_set1_ps(load_half(row) * x_scale[b]);
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(d, qx, acc1);
    } else {
      acc0 = _mm256_fmadd_ps(d, qx, acc0);
    }
    min_total += load_half(row + 2) * x_sum[b];
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + min_total;
}

TKV_AVX2 float dot_q8_row_q5_0(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int64_t b = 0; b < cols / 32; ++b, row += 22, xq += 34) {
    prefetch_weights(row);
    const __m256i codes = _mm256_or_si256(unpack_nibbles(row + 6), q5_high_bits(row + 2));
    const __m256i w = _mm256_sub_epi8(codes, sixteen);  // [-16, 15]
    const __m256 d = _mm256_set1_ps(load_half(row) * load_half(xq));
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(d, dot32_i8_i8(w, load_q8_values(xq)), acc1);
    } else {
      acc0 = _mm256_fmadd_ps(d, dot32_i8_i8(w, load_q8_values(xq)), acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

TKV_AVX2 float dot_q8_row_iq4_nl(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i table = iq4nl_table();
  for (int64_t b = 0; b < cols / 32; ++b, row += 18, xq += 34) {
    prefetch_weights(row);
    const __m256i w = _mm256_shuffle_epi8(table, unpack_nibbles(row + 2));
    const __m256 d = _mm256_set1_ps(load_half(row) * load_half(xq));
    if (b & 1) {
      acc1 = _mm256_fmadd_ps(d, dot32_i8_i8(w, load_q8_values(xq)), acc1);
    } else {
      acc0 = _mm256_fmadd_ps(d, dot32_i8_i8(w, load_q8_values(xq)), acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

TKV_AVX2 float dot_q8_row_iq4_xs(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i table = iq4nl_table();
  for (int64_t b = 0; b < cols / 256; ++b, row += 136) {
    prefetch_weights(row, 136);
    const float d = load_half(row);
    float dl[8];  // unpacked first, off the chain of multiply-adds
    for (int j = 0; j < 8; ++j) dl[j] = d * static_cast<float>(iq4_xs_scale(row, j) - 32);
    for (int j = 0; j < 8; ++j, xq += 34) {
      const __m256i w = _mm256_shuffle_epi8(table, unpack_nibbles(row + 8 + 16 * j));
      const float scale = dl[j] * load_half(xq);
      if (j & 1) {
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(scale), dot32_i8_i8(w, load_q8_values(xq)), acc1);
      } else {
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scale), dot32_i8_i8(w, load_q8_values(xq)), acc0);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Q5_K: Q4_K's dot with the fifth bit of sub-block j taken from bit j of each qh byte.
// Q5_K: Q4_K's layout with a fifth bit per value (qh); as in Q4_K, the eight sub-blocks'
// integer sums are reduced to one vector per super-block and the min term reads x_sum.
TKV_AVX2 float dot_q8_row_q5_k(const uint8_t* row, const uint8_t* xq, const float* x_scale, const float* x_sum,
                               int64_t cols) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i low_mask = _mm256_set1_epi8(15);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < cols / 256; ++b, row += 176, xq += 8 * 34, x_scale += 8, x_sum += 8) {
    prefetch_weights(row, 176);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16));
    __m256i qx[8];
    for (int j = 0; j < 8; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 48 + 32 * (j / 2)));
      const __m256i low = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, low_mask);
      // Shifting 16-bit lanes right by j brings bit j of each byte to bit 0; the mask drops
      // what crossed over from the neighbouring byte.
      const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), one), 4);
      const __m256i codes = _mm256_or_si256(low, high);  // 0..31
      qx[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load_q8_values(xq + 34 * j)), ones16);
    }
    alignas(8) uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      int s, m;
      k_scale_min(j, row + 4, s, m);
      sc[j] = static_cast<uint8_t>(s);
      mn[j] = static_cast<uint8_t>(m);
    }
    const __m256 scale = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(load_half(row)), u8x8_to_float(sc)),
                                       _mm256_loadu_ps(x_scale));
    const __m256 min = _mm256_mul_ps(_mm256_set1_ps(load_half(row + 2)), u8x8_to_float(mn));
    acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(lane_totals(qx)), acc);
    acc = _mm256_fnmadd_ps(min, _mm256_loadu_ps(x_sum), acc);
  }
  return hsum(acc);
}

// Two int16 per-sub-block factors: the low lane's products belong to values 0..15 of the run
// of 32, the high lane's to values 16..31.
TKV_AVX2 inline __m256i pair16(int low, int high) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(high)), _mm_set1_epi16(static_cast<int16_t>(low)));
}

// The 2-bit codes of run k (values 32k .. 32k + 31) of a Q2_K / Q3_K super-block whose qs starts
// at qs: bits 2 * (k % 4) of qs[32 * (k / 4) ..].
TKV_AVX2 inline __m256i two_bit_codes(const uint8_t* qs, int k) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (k / 4)));
  return _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * (k % 4)), _mm256_set1_epi8(3));
}

// Q2_K: x = d * sc * code - dmin * m per sub-block of 16; the scales ride in the madd that
// widens the int16 products, as in Q6_K.
TKV_AVX2 float dot_q8_row_q2_k(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};  // as Q5_K
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < cols / 256; ++b, row += 84) {
    prefetch_weights(row, 84);
    const float d = load_half(row + 80), dmin = load_half(row + 82);
    for (int k = 0; k < 8; ++k, xq += 34) {
      const uint8_t s0 = row[2 * k], s1 = row[2 * k + 1];
      const __m256i x = load_q8_values(xq);
      const __m256i qx16 = _mm256_maddubs_epi16(two_bit_codes(row + 16, k), x);
      const __m256i xs16 = _mm256_maddubs_epi16(ones, x);
      const __m256 qx = _mm256_cvtepi32_ps(_mm256_madd_epi16(qx16, pair16(s0 & 15, s1 & 15)));
      const __m256 xs = _mm256_cvtepi32_ps(_mm256_madd_epi16(xs16, pair16(s0 >> 4, s1 >> 4)));
      const float dx = load_half(xq);
      acc[k & 1] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), qx, acc[k & 1]);
      acc[2 + (k & 1)] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dx), xs, acc[2 + (k & 1)]);
    }
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// Q3_K: signed 3-bit codes (code2 - 4 where the hmask bit is clear) times signed 6-bit scales.
TKV_AVX2 float dot_q8_row_q3_k(const uint8_t* row, const uint8_t* xq, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i four = _mm256_set1_epi8(4);
  for (int64_t b = 0; b < cols / 256; ++b, row += 110) {
    prefetch_weights(row, 110);
    const float d = load_half(row + 108);
    int scales[16];
    q3_k_scales(row + 96, scales);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
    for (int k = 0; k < 8; ++k, xq += 34) {
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, k), one);
      // code2 - 4 + 4 * high: [-4, 3]
      const __m256i w = _mm256_sub_epi8(_mm256_add_epi8(two_bit_codes(row + 32, k), _mm256_slli_epi16(high, 2)), four);
      const __m256i x = load_q8_values(xq);
      const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
      const __m256 sum = _mm256_cvtepi32_ps(
          _mm256_madd_epi16(products, pair16(scales[2 * k] - 32, scales[2 * k + 1] - 32)));
      const __m256 dd = _mm256_set1_ps(d * load_half(xq));
      if (k & 1) {
        acc1 = _mm256_fmadd_ps(dd, sum, acc1);
      } else {
        acc0 = _mm256_fmadd_ps(dd, sum, acc0);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}


// out[0..32) = scale * code + offset for 32 codes (unsigned bytes, or signed with kSigned);
// the first 16 use (s0, o0), the last 16 (s1, o1): sub-blocks of 16 have their own scales.
template <bool kSigned>
TKV_AVX2 inline void store_codes(__m256i codes, float s0, float o0, float s1, float o1, float* out) {
  const __m128i halves[2] = {_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1)};
  for (int h = 0; h < 2; ++h) {
    const __m256 scale = _mm256_set1_ps(h ? s1 : s0), offset = _mm256_set1_ps(h ? o1 : o0);
    const __m128i v = halves[h];
    const __m256i a = kSigned ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
    const __m256i b = kSigned ? _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)) : _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
    _mm256_storeu_ps(out + 16 * h, _mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(a)), offset));
    _mm256_storeu_ps(out + 16 * h + 8, _mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(b)), offset));
  }
}

// Row decoders: what batched prefill (matmul) multiplies, and the float-activation dot's input.

TKV_AVX2 void decode_q4_1(const uint8_t* row, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, row += 20, out += 32) {
    const float d = load_half(row), m = load_half(row + 2);
    store_codes<false>(unpack_nibbles(row + 4), d, m, d, m, out);
  }
}

TKV_AVX2 void decode_q5_0(const uint8_t* row, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, row += 22, out += 32) {
    const float d = load_half(row);
    const __m256i codes = _mm256_or_si256(unpack_nibbles(row + 6), q5_high_bits(row + 2));
    store_codes<true>(_mm256_sub_epi8(codes, _mm256_set1_epi8(16)), d, 0.0f, d, 0.0f, out);
  }
}

TKV_AVX2 void decode_q5_1(const uint8_t* row, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, row += 24, out += 32) {
    const float d = load_half(row), m = load_half(row + 2);
    store_codes<false>(_mm256_or_si256(unpack_nibbles(row + 8), q5_high_bits(row + 4)), d, m, d, m, out);
  }
}

TKV_AVX2 void decode_iq4_nl(const uint8_t* row, int64_t cols, float* out) {
  const __m256i table = iq4nl_table();
  for (int64_t b = 0; b < cols / 32; ++b, row += 18, out += 32) {
    const float d = load_half(row);
    store_codes<true>(_mm256_shuffle_epi8(table, unpack_nibbles(row + 2)), d, 0.0f, d, 0.0f, out);
  }
}

TKV_AVX2 void decode_iq4_xs(const uint8_t* row, int64_t cols, float* out) {
  const __m256i table = iq4nl_table();
  for (int64_t b = 0; b < cols / 256; ++b, row += 136) {
    const float d = load_half(row);
    for (int j = 0; j < 8; ++j, out += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(row, j) - 32);
      store_codes<true>(_mm256_shuffle_epi8(table, unpack_nibbles(row + 8 + 16 * j)), dl, 0.0f, dl, 0.0f, out);
    }
  }
}

TKV_AVX2 void decode_q5_k(const uint8_t* row, int64_t cols, float* out) {
  const __m256i low_mask = _mm256_set1_epi8(15);
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < cols / 256; ++b, row += 176) {
    const float d = load_half(row), dmin = load_half(row + 2);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16));
    for (int j = 0; j < 8; ++j, out += 32) {
      int sc, m;
      k_scale_min(j, row + 4, sc, m);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 48 + 32 * (j / 2)));
      const __m256i low = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, low_mask);
      const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), one), 4);
      const float dl = d * static_cast<float>(sc), ml = -(dmin * static_cast<float>(m));
      store_codes<false>(_mm256_or_si256(low, high), dl, ml, dl, ml, out);
    }
  }
}

TKV_AVX2 void decode_q2_k(const uint8_t* row, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 256; ++b, row += 84) {
    const float d = load_half(row + 80), dmin = load_half(row + 82);
    for (int k = 0; k < 8; ++k, out += 32) {
      const uint8_t s0 = row[2 * k], s1 = row[2 * k + 1];
      const float dl0 = d * static_cast<float>(s0 & 15), ml0 = dmin * static_cast<float>(s0 >> 4);
      const float dl1 = d * static_cast<float>(s1 & 15), ml1 = dmin * static_cast<float>(s1 >> 4);
      store_codes<false>(two_bit_codes(row + 16, k), dl0, -ml0, dl1, -ml1, out);
    }
  }
}

TKV_AVX2 void decode_q3_k(const uint8_t* row, int64_t cols, float* out) {
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i four = _mm256_set1_epi8(4);
  for (int64_t b = 0; b < cols / 256; ++b, row += 110) {
    const float d = load_half(row + 108);
    int scales[16];
    q3_k_scales(row + 96, scales);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
    for (int k = 0; k < 8; ++k, out += 32) {
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, k), one);
      const __m256i w = _mm256_sub_epi8(_mm256_add_epi8(two_bit_codes(row + 32, k), _mm256_slli_epi16(high, 2)), four);
      const float dl0 = d * static_cast<float>(scales[2 * k] - 32);
      const float dl1 = d * static_cast<float>(scales[2 * k + 1] - 32);
      store_codes<true>(w, dl0, 0.0f, dl1, 0.0f, out);
    }
  }
}

// Float-activation dot: the row decoded as above, then an AVX2 float dot product.
template <RowDecodeFn kDecode>
TKV_AVX2 float dot_decoded(const uint8_t* row, const float* x, int64_t cols) {
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(cols));
  kDecode(row, cols, buffer.data());
  return avx2::dot_f32(buffer.data(), x, cols);
}

}  // namespace

void add_avx2_quant_kernels(GgmlType type, RowKernels& k) {
  switch (type) {
    case GgmlType::Q4_1:
      k.decode = &decode_q4_1;
      k.dot = &dot_decoded<&decode_q4_1>;
      k.dot_q8_sums = &dot_q8_with_min<false>;
      break;
    case GgmlType::Q5_0:
      k.decode = &decode_q5_0;
      k.dot = &dot_decoded<&decode_q5_0>;
      k.dot_q8 = &dot_q8_row_q5_0;
      break;
    case GgmlType::Q5_1:
      k.decode = &decode_q5_1;
      k.dot = &dot_decoded<&decode_q5_1>;
      k.dot_q8_sums = &dot_q8_with_min<true>;
      break;
    case GgmlType::IQ4_NL:
      k.decode = &decode_iq4_nl;
      k.dot = &dot_decoded<&decode_iq4_nl>;
      k.dot_q8 = &dot_q8_row_iq4_nl;
      break;
    case GgmlType::Q2_K:
      k.decode = &decode_q2_k;
      k.dot = &dot_decoded<&decode_q2_k>;
      k.dot_q8 = &dot_q8_row_q2_k;
      break;
    case GgmlType::Q3_K:
      k.decode = &decode_q3_k;
      k.dot = &dot_decoded<&decode_q3_k>;
      k.dot_q8 = &dot_q8_row_q3_k;
      break;
    case GgmlType::Q5_K:
      k.decode = &decode_q5_k;
      k.dot = &dot_decoded<&decode_q5_k>;
      k.dot_q8_sums = &dot_q8_row_q5_k;
      break;
    case GgmlType::IQ4_XS:
      k.decode = &decode_iq4_xs;
      k.dot = &dot_decoded<&decode_iq4_xs>;
      k.dot_q8 = &dot_q8_row_iq4_xs;
      break;
    default: break;
  }
}

#else

void add_avx2_quant_kernels(GgmlType, RowKernels&) {}

#endif

}  // namespace turbokv::engine::detail
