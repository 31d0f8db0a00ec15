// Scalar reference codecs of the 256-value super-block types Q2_K, Q3_K, Q5_K and IQ4_XS, and
// the encoders of all K-quants (Q4_K and Q6_K decode in tensor_types.cpp). Layouts in
// tensor_types.hpp.
//
// The encoders are deliberately simple, not ggml's error-minimizing searches: each sub-block's
// scale (and min) is chosen to cover its range, then quantized to the super-block's fp16 scale
// rounding *up*, so the grid always still covers the sub-block and no value is clipped. The
// cost is a slightly coarser step than llama-quantize would pick; the files are standard.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/tensor/quant_codecs.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine::detail {
namespace {

constexpr int kQK = 256;
// An fp16 scale rounds by at most 2^-11 relative; asking for this much more before rounding
// makes the stored scale at least the wanted one, so ceil(x / scale) stays within its range.
constexpr float kHalfHeadroom = 1.0f + 0x1p-10f;

// Stores `wanted` (>= 0) as fp16 at p, at least as large as wanted, and returns what was stored.
float store_scale_up(uint8_t* p, float wanted) {
  store_half(p, wanted * kHalfHeadroom);
  return load_half(p);
}

// ceil(v / unit) within [0, max]; 0 when unit is 0 (an all-zero super-block).
int ceil_units(float v, float unit, int max) {
  if (!(unit > 0.0f)) return 0;
  const float u = std::ceil(v / unit);
  if (!(u == u)) return 0;
  return static_cast<int>(std::clamp(u, 0.0f, static_cast<float>(max)));
}

// Super-block quantization with per-sub-block scales and mins (Q2_K, Q4_K, Q5_K):
// x ~ d * sc[j] * code - dmin * m[j], code in [0, kMaxCode], sc and m in [0, kMaxScale].
// Writes d and dmin (fp16) at d_at / dmin_at of the block and fills sc, m and codes.
template <int kSub, int kMaxCode, int kMaxScale>
void quantize_with_mins(const float* x, uint8_t* d_at, uint8_t* dmin_at, int* sc, int* m, int* codes) {
  constexpr int kSubs = kQK / kSub;
  float below[kSubs], top[kSubs];  // -min(0, min x) and max x per sub-block
  float max_below = 0.0f;
  for (int j = 0; j < kSubs; ++j) {
    float lo = 0.0f, hi = x[j * kSub];
    for (int i = 0; i < kSub; ++i) {
      lo = std::min(lo, x[j * kSub + i]);
      hi = std::max(hi, x[j * kSub + i]);
    }
    below[j] = -lo;
    top[j] = hi;
    max_below = std::max(max_below, below[j]);
  }
  // Mins first, rounded up: the grid starts at or below each sub-block's minimum.
  const float dmin = store_scale_up(dmin_at, max_below / kMaxScale);
  float offset[kSubs], step[kSubs], max_step = 0.0f;
  for (int j = 0; j < kSubs; ++j) {
    m[j] = ceil_units(below[j], dmin, kMaxScale);
    offset[j] = dmin * static_cast<float>(m[j]);
    step[j] = std::max(0.0f, top[j] + offset[j]) / kMaxCode;
    max_step = std::max(max_step, step[j]);
  }
  // Then the steps, rounded up: the grid's top is at or above each sub-block's maximum.
  const float d = store_scale_up(d_at, max_step / kMaxScale);
  for (int j = 0; j < kSubs; ++j) {
    sc[j] = ceil_units(step[j], d, kMaxScale);
    const float s = d * static_cast<float>(sc[j]);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int i = 0; i < kSub; ++i) codes[j * kSub + i] = round_clamp((x[j * kSub + i] + offset[j]) * inv, 0, kMaxCode);
  }
}

// Symmetric super-block quantization (Q3_K, Q6_K): x ~ d * sc[j] * code, code in
// [-kMaxCode - 1, kMaxCode], sc in [0, kMaxScale]; sub-blocks of 16.
template <int kMaxCode, int kMaxScale>
void quantize_symmetric(const float* x, uint8_t* d_at, int* sc, int* codes) {
  float step[16], max_step = 0.0f;
  for (int j = 0; j < 16; ++j) {
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * j + i]));
    step[j] = amax / kMaxCode;
    max_step = std::max(max_step, step[j]);
  }
  const float d = store_scale_up(d_at, max_step / kMaxScale);
  for (int j = 0; j < 16; ++j) {
    sc[j] = ceil_units(step[j], d, kMaxScale);
    const float s = d * static_cast<float>(sc[j]);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int i = 0; i < 16; ++i) codes[16 * j + i] = round_clamp(x[16 * j + i] * inv, -kMaxCode - 1, kMaxCode);
  }
}

// Q2_K / Q3_K: the 2-bit field of value e goes to qs[32 * (e / 128) + e % 32] at bit 2 * ((e / 32) % 4).
void pack_2bit(const int* codes2, uint8_t* qs) {
  std::memset(qs, 0, 64);
  for (int e = 0; e < kQK; ++e) {
    qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((codes2[e] & 3) << (2 * ((e / 32) % 4)));
  }
}

// Q4_K / Q5_K: eight 6-bit scales and mins into 12 bytes (the inverse of k_scale_min).
void pack_k_scales(const int* sc, const int* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// Q4_K / Q5_K: the low nibble of value e goes to qs[32 * (e / 64) + e % 32], low half for even
// sub-blocks of 32, high half for odd ones.
void pack_k_nibbles(const int* codes, uint8_t* qs) {
  std::memset(qs, 0, 128);
  for (int e = 0; e < kQK; ++e) {
    qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>((codes[e] & 15) << (4 * ((e / 32) % 2)));
  }
}

}  // namespace

// Q2_K / Q3_K decode run by run (32 values: one 2-bit field of 32 qs bytes, two sub-blocks of
// 16), in ggml's order of float operations: dl = d * scale, then dl * code - ml.
void dequantize_q2_k(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / kQK; ++b, src += 84) {
    const float d = load_half(src + 80), dmin = load_half(src + 82);
    for (int run = 0; run < 8; ++run) {
      const uint8_t* q = src + 16 + 32 * (run / 4);
      const int shift = 2 * (run % 4);
      for (int half = 0; half < 2; ++half, out += 16) {
        const uint8_t s = src[2 * run + half];
        const float dl = d * static_cast<float>(s & 15), ml = dmin * static_cast<float>(s >> 4);
        for (int l = 0; l < 16; ++l) out[l] = dl * static_cast<float>((q[16 * half + l] >> shift) & 3) - ml;
      }
    }
  }
}

void dequantize_q3_k(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / kQK; ++b, src += 110) {
    const float d = load_half(src + 108);
    int scales[16];
    q3_k_scales(src + 96, scales);
    for (int run = 0; run < 8; ++run) {
      const uint8_t* q = src + 32 + 32 * (run / 4);
      const int shift = 2 * (run % 4);
      for (int half = 0; half < 2; ++half, out += 16) {
        const float dl = d * static_cast<float>(scales[2 * run + half] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int code2 = (q[l] >> shift) & 3;
          const int code = (src[l] >> run) & 1 ? code2 : code2 - 4;  // hmask bit `run` of byte l
          out[l - 16 * half] = dl * static_cast<float>(code);
        }
      }
    }
  }
}

void dequantize_q5_k(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / kQK; ++b, src += 176, out += kQK) {
    const float d = load_half(src), dmin = load_half(src + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(j, src + 4, sc, m);
      const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        const int low = (src[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
        const int high = ((src[16 + l] >> j) & 1) << 4;
        out[32 * j + l] = dj * static_cast<float>(low | high) - mj;
      }
    }
  }
}

void dequantize_iq4_xs(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / kQK; ++b, src += 136, out += kQK) {
    const float d = load_half(src);
    for (int j = 0; j < 8; ++j) {
      const float dl = d * static_cast<float>(iq4_xs_scale(src, j) - 32);
      const uint8_t* qs = src + 8 + 16 * j;
      for (int i = 0; i < 16; ++i) {
        out[32 * j + i] = dl * static_cast<float>(kIq4nlValues[qs[i] & 15]);
        out[32 * j + i + 16] = dl * static_cast<float>(kIq4nlValues[qs[i] >> 4]);
      }
    }
  }
}

void quantize_q2_k(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q2_K");
  for (int64_t b = 0; b < cols / kQK; ++b, in += kQK, dst += 84) {
    int sc[16], m[16], codes[kQK];
    quantize_with_mins<16, 3, 15>(in, dst + 80, dst + 82, sc, m, codes);
    for (int j = 0; j < 16; ++j) dst[j] = static_cast<uint8_t>(sc[j] | (m[j] << 4));
    pack_2bit(codes, dst + 16);
  }
}

void quantize_q3_k(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q3_K");
  for (int64_t b = 0; b < cols / kQK; ++b, in += kQK, dst += 110) {
    int sc[16], codes[kQK];
    quantize_symmetric<3, 31>(in, dst + 108, sc, codes);
    // Codes -4..3: the high bit (hmask) is set for codes >= 0, which then store code2 = code.
    std::memset(dst, 0, 32);
    int codes2[kQK];
    for (int e = 0; e < kQK; ++e) {
      if (codes[e] >= 0) dst[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      codes2[e] = codes[e] >= 0 ? codes[e] : codes[e] + 4;
    }
    pack_2bit(codes2, dst + 32);
    uint8_t* packed = dst + 96;
    std::memset(packed, 0, 12);
    for (int j = 0; j < 16; ++j) {
      const int stored = sc[j] + 32;
      packed[j % 8] |= static_cast<uint8_t>((stored & 15) << (4 * (j / 8)));
      packed[8 + j % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (j / 4)));
    }
  }
}

void quantize_q4_k(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q4_K");
  for (int64_t b = 0; b < cols / kQK; ++b, in += kQK, dst += 144) {
    int sc[8], m[8], codes[kQK];
    quantize_with_mins<32, 15, 63>(in, dst, dst + 2, sc, m, codes);
    pack_k_scales(sc, m, dst + 4);
    pack_k_nibbles(codes, dst + 16);
  }
}

void quantize_q5_k(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q5_K");
  for (int64_t b = 0; b < cols / kQK; ++b, in += kQK, dst += 176) {
    int sc[8], m[8], codes[kQK];
    quantize_with_mins<32, 31, 63>(in, dst, dst + 2, sc, m, codes);
    pack_k_scales(sc, m, dst + 4);
    std::memset(dst + 16, 0, 32);
    for (int e = 0; e < kQK; ++e) dst[16 + e % 32] |= static_cast<uint8_t>((codes[e] >> 4) << (e / 32));
    pack_k_nibbles(codes, dst + 48);
  }
}

void quantize_q6_k(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q6_K");
  for (int64_t b = 0; b < cols / kQK; ++b, in += kQK, dst += 210) {
    int sc[16], codes[kQK];
    quantize_symmetric<31, 127>(in, dst + 208, sc, codes);
    for (int j = 0; j < 16; ++j) dst[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(sc[j]));
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        int q[4];
        for (int k = 0; k < 4; ++k) q[k] = codes[128 * h + 32 * k + l] + 32;  // stored 0..63
        dst[64 * h + l] = static_cast<uint8_t>((q[0] & 15) | ((q[2] & 15) << 4));
        dst[64 * h + l + 32] = static_cast<uint8_t>((q[1] & 15) | ((q[3] & 15) << 4));
        dst[128 + 32 * h + l] =
            static_cast<uint8_t>((q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6));
      }
    }
  }
}

// IQ4_XS: each sub-block of 32 wants the scale (its value of largest magnitude) / -127, as
// IQ4_NL; those are quantized to 6-bit multiples (-32..31) of one fp16 d, the largest mapping
// to -32. Codes take the level nearest to x over the scale actually stored.
void quantize_iq4_xs(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "IQ4_XS");
  for (int64_t b = 0; b < cols / kQK; ++b, in += kQK, dst += 136) {
    float wanted[8];
    for (int j = 0; j < 8; ++j) wanted[j] = extreme(in + 32 * j, 32) / -127.0f;
    store_half(dst, extreme(wanted, 8) / -32.0f);
    const float d = load_half(dst);
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t high = 0;
    std::memset(dst + 4, 0, 4);
    for (int j = 0; j < 8; ++j) {
      const int l = round_clamp(wanted[j] * inv_d, -32, 31);
      const int stored = l + 32;
      dst[4 + j / 2] |= static_cast<uint8_t>((stored & 15) << (4 * (j % 2)));
      high = static_cast<uint16_t>(high | ((stored >> 4) << (2 * j)));
      const float dl = d * static_cast<float>(l);
      const float inv = dl != 0.0f ? 1.0f / dl : 0.0f;
      const float* x = in + 32 * j;
      for (int i = 0; i < 16; ++i) {
        dst[8 + 16 * j + i] = static_cast<uint8_t>(nearest_iq4nl(x[i] * inv) | (nearest_iq4nl(x[i + 16] * inv) << 4));
      }
    }
    std::memcpy(dst + 2, &high, 2);
  }
}

}  // namespace turbokv::engine::detail
