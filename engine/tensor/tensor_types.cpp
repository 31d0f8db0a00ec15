// Type table and the scalar reference codecs (the oracle the SIMD kernels are tested against).
#include "engine/tensor/tensor_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/tensor/quant_codecs.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"

namespace turbokv::engine {
namespace {

using detail::k_scale_min;
using detail::load_half;
using detail::store_half;

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

void dequantize_q4_k(const uint8_t* src, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 256; ++b, src += 144) {
    const float d = load_half(src);
    const float dmin = load_half(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    float* y = out + b * 256;
    for (int chunk = 0; chunk < 4; ++chunk) {
      int sc_lo, m_lo, sc_hi, m_hi;
      k_scale_min(2 * chunk, scales, sc_lo, m_lo);
      k_scale_min(2 * chunk + 1, scales, sc_hi, m_hi);
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
    // fmax/fmin (not std::clamp): a NaN x becomes a code instead of reaching the int
    // conversion, which would be UB. This also quantizes activations, so it must not throw.
    for (int i = 0; i < 32; ++i) {
      const float q = std::fmin(std::fmax(std::nearbyint(x[i] * inv), -127.0f), 127.0f);
      dst[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
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
        return static_cast<uint8_t>(std::fmin(std::fmax(std::floor(v * inv + 8.5f), 0.0f), 15.0f));  // NaN -> 0
      };
      dst[2 + i] = static_cast<uint8_t>(code(x[i]) | (code(x[i + 16]) << 4));
    }
  }
}

// One row per ggml type number ever assigned (ggml.h); block 0 marks the ones we do not read.
struct TypeInfo {
  const char* name;
  size_t block;  // values per block
  size_t bytes;  // bytes per block
};

constexpr TypeInfo kTypes[] = {
    {"F32", 1, 4},         {"F16", 1, 2},        {"Q4_0", 32, 18},     {"Q4_1", 32, 20},
    {"Q4_2", 0, 0},        {"Q4_3", 0, 0},       {"Q5_0", 32, 22},     {"Q5_1", 32, 24},
    {"Q8_0", 32, 34},      {"Q8_1", 0, 0},       {"Q2_K", 256, 84},    {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},    {"Q5_K", 256, 176},   {"Q6_K", 256, 210},   {"Q8_K", 0, 0},
    {"IQ2_XXS", 0, 0},     {"IQ2_XS", 0, 0},     {"IQ3_XXS", 0, 0},    {"IQ1_S", 0, 0},
    {"IQ4_NL", 32, 18},    {"IQ3_S", 0, 0},      {"IQ2_S", 0, 0},      {"IQ4_XS", 256, 136},
    {"I8", 0, 0},          {"I16", 0, 0},        {"I32", 0, 0},        {"I64", 0, 0},
    {"F64", 0, 0},         {"IQ1_M", 0, 0},      {"BF16", 1, 2},       {"Q4_0_4_4", 0, 0},
    {"Q4_0_4_8", 0, 0},    {"Q4_0_8_8", 0, 0},   {"TQ1_0", 0, 0},      {"TQ2_0", 0, 0},
    {"IQ4_NL_4_4", 0, 0},  {"IQ4_NL_4_8", 0, 0}, {"IQ4_NL_8_8", 0, 0}, {"MXFP4", 0, 0},
};
constexpr uint32_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);

// Every GgmlType value has its row in the table (a new enum value without one fails to build).
constexpr bool has_row(GgmlType t) {
  return static_cast<uint32_t>(t) < kTypeCount && kTypes[static_cast<uint32_t>(t)].block != 0;
}
static_assert(has_row(GgmlType::F32) && has_row(GgmlType::F16) && has_row(GgmlType::BF16) &&
              has_row(GgmlType::Q8_0) && has_row(GgmlType::Q4_0) && has_row(GgmlType::Q4_1) &&
              has_row(GgmlType::Q5_0) && has_row(GgmlType::Q5_1) && has_row(GgmlType::IQ4_NL) &&
              has_row(GgmlType::Q2_K) && has_row(GgmlType::Q3_K) && has_row(GgmlType::Q4_K) &&
              has_row(GgmlType::Q5_K) && has_row(GgmlType::Q6_K) && has_row(GgmlType::IQ4_XS));

const TypeInfo& supported_info(GgmlType type) {
  const auto raw = static_cast<uint32_t>(type);
  if (raw >= kTypeCount || kTypes[raw].block == 0) throw Error(fmt::format("unknown tensor type {}", raw));
  return kTypes[raw];
}

}  // namespace

bool is_supported_type(uint32_t raw) { return raw < kTypeCount && kTypes[raw].block != 0; }

const char* type_name(GgmlType type) {
  const auto raw = static_cast<uint32_t>(type);
  return is_supported_type(raw) ? kTypes[raw].name : "unknown";
}

const char* ggml_type_name(uint32_t raw) { return raw < kTypeCount ? kTypes[raw].name : nullptr; }

std::string unsupported_type_message(uint32_t raw) {
  if (const char* name = ggml_type_name(raw)) return fmt::format("{} (type {}) is not supported", name, raw);
  return fmt::format("type {} is not a ggml type this reader knows (not supported)", raw);
}

size_t block_size(GgmlType type) { return supported_info(type).block; }

size_t block_bytes(GgmlType type) { return supported_info(type).bytes; }

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

void check_scales_finite(const WeightMatrix& w) {
  // Byte offsets of the fp16 scale fields inside one block of each type.
  size_t fields[2] = {0, 0};
  int n_fields = 1;
  switch (w.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: break;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      fields[1] = 2;
      n_fields = 2;
      break;
    case GgmlType::Q2_K:
      fields[0] = 80;
      fields[1] = 82;
      n_fields = 2;
      break;
    case GgmlType::Q3_K: fields[0] = 108; break;
    case GgmlType::Q6_K: fields[0] = 208; break;
  }
  const size_t stride = row_bytes(w.type, w.cols);
  const size_t bytes = block_bytes(w.type);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = base + static_cast<size_t>(r) * stride;
    for (size_t at = 0; at < stride; at += bytes) {
      for (int f = 0; f < n_fields; ++f) {
        uint16_t h;
        std::memcpy(&h, row + at + fields[f], 2);
        if ((h & 0x7C00u) == 0x7C00u) {  // all-ones exponent: infinity or NaN
          throw Error(fmt::format("{} row {} block {}: scale is {} (fp16 0x{:04x})", type_name(w.type), r,
                                  at / bytes, (h & 0x03FFu) != 0 ? "NaN" : "infinite", h));
        }
      }
    }
  }
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
    case GgmlType::Q4_1: detail::dequantize_q4_1(src, n, out); return;
    case GgmlType::Q5_0: detail::dequantize_q5_0(src, n, out); return;
    case GgmlType::Q5_1: detail::dequantize_q5_1(src, n, out); return;
    case GgmlType::IQ4_NL: detail::dequantize_iq4_nl(src, n, out); return;
    case GgmlType::Q2_K: detail::dequantize_q2_k(src, n, out); return;
    case GgmlType::Q3_K: detail::dequantize_q3_k(src, n, out); return;
    case GgmlType::Q5_K: detail::dequantize_q5_k(src, n, out); return;
    case GgmlType::IQ4_XS: detail::dequantize_iq4_xs(src, n, out); return;
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
    case GgmlType::Q4_1: detail::quantize_q4_1(in, cols, dst); return;
    case GgmlType::Q5_0: detail::quantize_q5_0(in, cols, dst); return;
    case GgmlType::Q5_1: detail::quantize_q5_1(in, cols, dst); return;
    case GgmlType::IQ4_NL: detail::quantize_iq4_nl(in, cols, dst); return;
    case GgmlType::Q2_K: detail::quantize_q2_k(in, cols, dst); return;
    case GgmlType::Q3_K: detail::quantize_q3_k(in, cols, dst); return;
    case GgmlType::Q4_K: detail::quantize_q4_k(in, cols, dst); return;
    case GgmlType::Q5_K: detail::quantize_q5_k(in, cols, dst); return;
    case GgmlType::Q6_K: detail::quantize_q6_k(in, cols, dst); return;
    case GgmlType::IQ4_XS: detail::quantize_iq4_xs(in, cols, dst); return;
  }
  throw Error(fmt::format("quantize_row: no encoder for {}", type_name(type)));
}

}  // namespace turbokv::engine
