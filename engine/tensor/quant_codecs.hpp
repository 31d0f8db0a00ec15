// Internal: scalar reference codecs of the block types added after Q8_0/Q4_0/Q4_K/Q6_K (layouts
// in tensor_types.hpp). dequantize_* decode `cols` values (a whole number of blocks, checked by
// the caller) from src; quantize_* encode them, throwing turbokv::Error on a non-finite input
// (one NaN would otherwise poison a block's scale, and converting NaN to an integer code is UB).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "turbokv/half.hpp"

namespace turbokv::engine::detail {

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

inline void store_half(uint8_t* p, float f) {
  const uint16_t h = float_to_half(f);
  std::memcpy(p, &h, 2);
}

// Rounds v to the nearest integer in [lo, hi]. Inputs are finite, but a scale that overflowed
// fp16 can still make v NaN (inf * 0), and converting NaN to int is UB: it maps to lo.
inline int round_clamp(float v, int lo, int hi) {
  if (!(v == v)) return lo;
  return static_cast<int>(std::clamp(std::nearbyint(v), static_cast<float>(lo), static_cast<float>(hi)));
}

// The value of largest magnitude (signed) among x[0..n); 0 if all are 0.
inline float extreme(const float* x, int n) {
  float e = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(e)) e = x[i];
  }
  return e;
}

// Index of the IQ4_NL level (kIq4nlValues) nearest to v.
int nearest_iq4nl(float v);

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void k_scale_min(int j, const uint8_t* scales, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Q3_K: the 16 stored 6-bit scales (0..63, the scale is the value - 32) from the 12 packed bytes.
inline void q3_k_scales(const uint8_t* packed, int out[16]) {
  for (int j = 0; j < 16; ++j) {
    out[j] = ((packed[j % 8] >> (4 * (j / 8))) & 15) | (((packed[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
  }
}

// IQ4_XS: the 6-bit scale (0..63, the scale is the value - 32) of sub-block j (0..7).
inline int iq4_xs_scale(const uint8_t* block, int j) {
  uint16_t high;
  std::memcpy(&high, block + 2, 2);
  return ((block[4 + j / 2] >> (4 * (j % 2))) & 15) | (((high >> (2 * j)) & 3) << 4);
}

void dequantize_q4_1(const uint8_t* src, int64_t cols, float* out);
void dequantize_q5_0(const uint8_t* src, int64_t cols, float* out);
void dequantize_q5_1(const uint8_t* src, int64_t cols, float* out);
void dequantize_iq4_nl(const uint8_t* src, int64_t cols, float* out);
void dequantize_q2_k(const uint8_t* src, int64_t cols, float* out);
void dequantize_q3_k(const uint8_t* src, int64_t cols, float* out);
void dequantize_q5_k(const uint8_t* src, int64_t cols, float* out);
void dequantize_iq4_xs(const uint8_t* src, int64_t cols, float* out);

void quantize_q4_1(const float* in, int64_t cols, uint8_t* dst);
void quantize_q5_0(const float* in, int64_t cols, uint8_t* dst);
void quantize_q5_1(const float* in, int64_t cols, uint8_t* dst);
void quantize_iq4_nl(const float* in, int64_t cols, uint8_t* dst);
void quantize_q2_k(const float* in, int64_t cols, uint8_t* dst);
void quantize_q3_k(const float* in, int64_t cols, uint8_t* dst);
void quantize_q4_k(const float* in, int64_t cols, uint8_t* dst);
void quantize_q5_k(const float* in, int64_t cols, uint8_t* dst);
void quantize_q6_k(const float* in, int64_t cols, uint8_t* dst);
void quantize_iq4_xs(const float* in, int64_t cols, uint8_t* dst);

// Throws turbokv::Error naming `type` if any of in[0..n) is NaN or infinite.
void require_finite(const float* in, int64_t n, const char* type);

}  // namespace turbokv::engine::detail
