// Scalar reference codecs of the 32-value block types Q4_1, Q5_0, Q5_1 and IQ4_NL (layouts in
// tensor_types.hpp). The quantizers are the simple ones (one scale from the block's range, codes
// rounded to nearest), as ggml's reference quantizers for these types are.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/tensor/quant_codecs.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine::detail {
namespace {

// Bit 4 of the 5-bit code of value i (0..31) of a Q5 block, from its qh word.
inline int high_bit(uint32_t qh, int i) { return static_cast<int>((qh >> i) & 1u) << 4; }

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// min and max of x[0..n).
void min_max(const float* x, int n, float& lo, float& hi) {
  lo = x[0];
  hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
}

// Encodes the 32 codes (each 0..31) of a Q5 block: low nibbles into qs (Q4_0 order), bit 4 into
// the qh word.
void pack_q5(const int* codes, uint8_t* qh_out, uint8_t* qs) {
  uint32_t qh = 0;
  for (int i = 0; i < 16; ++i) {
    qs[i] = static_cast<uint8_t>((codes[i] & 15) | ((codes[i + 16] & 15) << 4));
    qh |= static_cast<uint32_t>(codes[i] >> 4) << i;
    qh |= static_cast<uint32_t>(codes[i + 16] >> 4) << (i + 16);
  }
  std::memcpy(qh_out, &qh, 4);
}

}  // namespace

int nearest_iq4nl(float v) {
  int best = 0;
  float best_err = std::fabs(v - kIq4nlValues[0]);
  for (int k = 1; k < 16; ++k) {
    const float err = std::fabs(v - kIq4nlValues[k]);
    if (err < best_err) {
      best_err = err;
      best = k;
    }
  }
  return best;
}

void require_finite(const float* in, int64_t n, const char* type) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(in[i])) {
      throw Error(fmt::format("quantize_row: value {} at index {} cannot be encoded as {}", in[i], i, type));
    }
  }
}

void dequantize_q4_1(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, src += 20, out += 32) {
    const float d = load_half(src), m = load_half(src + 2);
    for (int i = 0; i < 16; ++i) {
      out[i] = d * static_cast<float>(src[4 + i] & 15) + m;
      out[i + 16] = d * static_cast<float>(src[4 + i] >> 4) + m;
    }
  }
}

void dequantize_q5_0(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, src += 22, out += 32) {
    const float d = load_half(src);
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int i = 0; i < 16; ++i) {
      out[i] = d * static_cast<float>(((qs[i] & 15) | high_bit(qh, i)) - 16);
      out[i + 16] = d * static_cast<float>(((qs[i] >> 4) | high_bit(qh, i + 16)) - 16);
    }
  }
}

void dequantize_q5_1(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, src += 24, out += 32) {
    const float d = load_half(src), m = load_half(src + 2);
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int i = 0; i < 16; ++i) {
      out[i] = d * static_cast<float>((qs[i] & 15) | high_bit(qh, i)) + m;
      out[i + 16] = d * static_cast<float>((qs[i] >> 4) | high_bit(qh, i + 16)) + m;
    }
  }
}

void dequantize_iq4_nl(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, src += 18, out += 32) {
    const float d = load_half(src);
    for (int i = 0; i < 16; ++i) {
      out[i] = d * static_cast<float>(kIq4nlValues[src[2 + i] & 15]);
      out[i + 16] = d * static_cast<float>(kIq4nlValues[src[2 + i] >> 4]);
    }
  }
}

// Q4_1 / Q5_1: the block's range in 2^bits - 1 steps from its minimum. Codes use the fp16-rounded
// d and m that the decoder will see, so their rounding is not counted twice.
template <int kMaxCode>
void quantize_with_min(const float* x, uint8_t* dst) {
  float lo, hi;
  min_max(x, 32, lo, hi);
  store_half(dst, (hi - lo) / kMaxCode);
  store_half(dst + 2, lo);
  const float d = load_half(dst), m = load_half(dst + 2);
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  int codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = round_clamp((x[i] - m) * inv, 0, kMaxCode);
  if constexpr (kMaxCode == 15) {
    for (int i = 0; i < 16; ++i) dst[4 + i] = static_cast<uint8_t>(codes[i] | (codes[i + 16] << 4));
  } else {
    pack_q5(codes, dst + 4, dst + 8);
  }
}

void quantize_q4_1(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q4_1");
  for (int64_t b = 0; b < cols / 32; ++b) quantize_with_min<15>(in + 32 * b, dst + 20 * b);
}

void quantize_q5_1(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q5_1");
  for (int64_t b = 0; b < cols / 32; ++b) quantize_with_min<31>(in + 32 * b, dst + 24 * b);
}

// Q5_0: as Q4_0, the value of largest magnitude maps to code 0 (-16 steps).
void quantize_q5_0(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "Q5_0");
  for (int64_t b = 0; b < cols / 32; ++b, dst += 22) {
    const float* x = in + 32 * b;
    store_half(dst, extreme(x, 32) / -16.0f);
    const float d = load_half(dst);
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    int codes[32];
    for (int i = 0; i < 32; ++i) codes[i] = round_clamp(x[i] * inv + 16.0f, 0, 31);
    pack_q5(codes, dst + 2, dst + 6);
  }
}

// IQ4_NL: the value of largest magnitude maps to the level -127; every value takes the nearest
// level.
void quantize_iq4_nl(const float* in, int64_t cols, uint8_t* dst) {
  require_finite(in, cols, "IQ4_NL");
  for (int64_t b = 0; b < cols / 32; ++b, dst += 18) {
    const float* x = in + 32 * b;
    store_half(dst, extreme(x, 32) / -127.0f);
    const float d = load_half(dst);
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 16; ++i) {
      dst[2 + i] = static_cast<uint8_t>(nearest_iq4nl(x[i] * inv) | (nearest_iq4nl(x[i + 16] * inv) << 4));
    }
  }
}

}  // namespace turbokv::engine::detail
