// Type table and the scalar reference codecs (the oracle the SIMD kernels are tested against).
#include "engine/tensor_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "turbokv/error.hpp"
#include "turbokv/half.hpp"

namespace turbokv::engine {
namespace {

constexpr size_t kQ8Block = 32;
constexpr size_t kQ4Block = 32;
constexpr size_t kSuperBlock = 256;

float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

void store_half(uint8_t* p, float f) {
  const uint16_t h = float_to_half(f);
  std::memcpy(p, &h, 2);
}

void dequantize_q8_0(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, src += 34) {
    const float d = load_half(src);
    for (int i = 0; i < 32; ++i) out[b * 32 + i] = d * static_cast<float>(static_cast<int8_t>(src[2 + i]));
  }
}

void dequantize_q4_0(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 32; ++b, src += 18) {
    const float d = load_half(src);
    for (int i = 0; i < 16; ++i) {
      const uint8_t byte = src[2 + i];
      out[b * 32 + i] = d * static_cast<float>((byte & 15) - 8);
      out[b * 32 + i + 16] = d * static_cast<float>((byte >> 4) - 8);
    }
  }
}

void q4_k_scale_min(int j, const uint8_t* scales, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

void dequantize_q4_k(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 256; ++b, src += 144) {
    const float d = load_half(src);
    const float dmin = load_half(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    float* y = out + b * 256;
    for (int chunk = 0; chunk < 4; ++chunk) {
      int sc_lo, m_lo, sc_hi, m_hi;
      q4_k_scale_min(2 * chunk, scales, sc_lo, m_lo);
      q4_k_scale_min(2 * chunk + 1, scales, sc_hi, m_hi);
      const float d_lo = d * static_cast<float>(sc_lo), min_lo = dmin * static_cast<float>(m_lo);
      const float d_hi = d * static_cast<float>(sc_hi), min_hi = dmin * static_cast<float>(m_hi);
      const uint8_t* q = qs + 32 * chunk;
      for (int l = 0; l < 32; ++l) {
        y[64 * chunk + l] = d_lo * static_cast<float>(q[l] & 15) - min_lo;
        y[64 * chunk + 32 + l] = d_hi * static_cast<float>(q[l] >> 4) - min_hi;
      }
    }
  }
}

void dequantize_q6_k(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 256; ++b, src += 210) {
    const float d = load_half(src + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(src + 192);
    float* y = out + b * 256;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = src + 64 * half;
      const uint8_t* qh = src + 128 + 32 * half;
      const int8_t* sc = scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const int is = l / 16;
        y[128 * half + l] = d * static_cast<float>(sc[is + 0] * q0);
        y[128 * half + l + 32] = d * static_cast<float>(sc[is + 2] * q1);
        y[128 * half + l + 64] = d * static_cast<float>(sc[is + 4] * q2);
        y[128 * half + l + 96] = d * static_cast<float>(sc[is + 6] * q3);
      }
    }
  }
}

void quantize_q8_0(const float* in, int64_t cols, uint8_t* dst) {
  for (int64_t b = 0; b < cols / 32; ++b, dst += 34) {
    const float* x = in + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    store_half(dst, d);
    for (int i = 0; i < 32; ++i) {
      const float q = std::nearbyint(x[i] * inv);
      dst[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
  }
}

void quantize_q4_0(const float* in, int64_t cols, uint8_t* dst) {
  for (int64_t b = 0; b < cols / 32; ++b, dst += 18) {
    const float* x = in + b * 32;
    // The value of largest magnitude maps to -8, so the full range [-8, 7] is used on its side.
    float extreme = 0.0f;
    for (int i = 0; i < 32; ++i) {
      if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    }
    const float d = extreme / -8.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    store_half(dst, d);
    for (int i = 0; i < 16; ++i) {
      const auto code = [&](float v) {
        return static_cast<uint8_t>(std::clamp(std::floor(v * inv + 8.5f), 0.0f, 15.0f));
      };
      dst[2 + i] = static_cast<uint8_t>(code(x[i]) | (code(x[i + 16]) << 4));
    }
  }
}

}  // namespace

bool is_supported_type(uint32_t raw) {
  switch (static_cast<GgmlType>(raw)) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::BF16:
      return true;
  }
  return false;
}

const char* type_name(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return "F32";
    case GgmlType::F16: return "F16";
    case GgmlType::Q4_0: return "Q4_0";
    case GgmlType::Q8_0: return "Q8_0";
    case GgmlType::Q4_K: return "Q4_K";
    case GgmlType::Q6_K: return "Q6_K";
    case GgmlType::BF16: return "BF16";
  }
  return "unknown";
}

size_t block_size(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return 1;
    case GgmlType::Q4_0: return kQ4Block;
    case GgmlType::Q8_0: return kQ8Block;
    case GgmlType::Q4_K:
    case GgmlType::Q6_K: return kSuperBlock;
  }
  throw Error(fmt::format("unknown tensor type {}", static_cast<uint32_t>(type)));
}

size_t block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return 4;
    case GgmlType::F16:
    case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return 18;
    case GgmlType::Q8_0: return 34;
    case GgmlType::Q4_K: return 144;
    case GgmlType::Q6_K: return 210;
  }
  throw Error(fmt::format("unknown tensor type {}", static_cast<uint32_t>(type)));
}

size_t row_bytes(GgmlType type, int64_t cols) {
  const size_t block = block_size(type);
  if (cols < 0) throw Error(fmt::format("row_bytes: negative row length {}", cols));
  if (static_cast<uint64_t>(cols) % block != 0) {
    throw Error(fmt::format("row length {} is not a multiple of the {} block size {}", cols,
                            type_name(type), block));
  }
  const uint64_t blocks = static_cast<uint64_t>(cols) / block;
  if (blocks > std::numeric_limits<size_t>::max() / block_bytes(type)) {
    throw Error(fmt::format("row_bytes: row of {} {} values overflows", cols, type_name(type)));
  }
  return blocks * block_bytes(type);
}

void dequantize_row(const WeightMatrix& w, int64_t row, float* out) {
  if (row < 0 || row >= w.rows) {
    throw Error(fmt::format("dequantize_row: row {} outside [0, {})", row, w.rows));
  }
  const size_t stride = row_bytes(w.type, w.cols);
  const auto* src = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row) * stride;
  const int64_t n = w.cols;
  switch (w.type) {
    case GgmlType::F32:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = load_half(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = bf16_to_float(b);
      }
      return;
    case GgmlType::Q8_0: dequantize_q8_0(src, n, out); return;
    case GgmlType::Q4_0: dequantize_q4_0(src, n, out); return;
    case GgmlType::Q4_K: dequantize_q4_k(src, n, out); return;
    case GgmlType::Q6_K: dequantize_q6_k(src, n, out); return;
  }
}

void quantize_row(GgmlType type, const float* in, int64_t cols, void* out) {
  row_bytes(type, cols);  // validates cols
  auto* dst = static_cast<uint8_t*>(out);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, in, static_cast<size_t>(cols) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < cols; ++i) store_half(dst + 2 * i, in[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < cols; ++i) {
        const uint16_t b = float_to_bf16(in[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return;
    case GgmlType::Q8_0: quantize_q8_0(in, cols, dst); return;
    case GgmlType::Q4_0: quantize_q4_0(in, cols, dst); return;
    case GgmlType::Q4_K:
    case GgmlType::Q6_K: break;
  }
  throw Error(fmt::format("quantize_row: no encoder for {}", type_name(type)));
}

}  // namespace turbokv::engine
