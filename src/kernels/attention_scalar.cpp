// Scalar block kernels for attention: the portable fallback and the oracle every SIMD table is
// tested against (float accumulation, straightforward loops).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "attention/attention_kernels.hpp"
#include "turbokv/codec.hpp"
#include "turbokv/half.hpp"

namespace turbokv::attn {

namespace {

// Code j of a group, read from the LSB-first bit stream (bits <= 8 spans at most two bytes).
inline unsigned read_code(const uint8_t* group, int j, int bits) {
  const size_t bit = static_cast<size_t>(j) * bits;
  const size_t byte = bit / 8;
  const unsigned shift = bit % 8;
  unsigned word = group[byte];
  if (shift + bits > 8) word |= static_cast<unsigned>(group[byte + 1]) << 8;
  return (word >> shift) & ((1u << bits) - 1u);
}

// Fused: one fused multiply-add chain per score (over j) and per accumulator lane (over t),
// the operations the blocked prefill SIMD kernels perform in their lanes (the prefill
// reference); otherwise a multiply and an add, zero weights skipped (the decode kernels').
template <bool Fused, typename Key, typename Convert>
void dots_dense(const float* q, size_t q_stride, int rows, const Key* keys, size_t n, int dim,
                float* scores, size_t ld, Convert convert) {
  for (size_t t = 0; t < n; ++t) {
    const Key* k = keys + t * dim;
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + r * q_stride;
      float dot = 0.0f;
      for (int j = 0; j < dim; ++j) {
        if constexpr (Fused) dot = std::fma(qr[j], convert(k[j]), dot);
        else dot += qr[j] * convert(k[j]);
      }
      scores[r * ld + t] = dot;
    }
  }
}

template <bool Fused, typename Value, typename Convert>
void accumulate_dense(const float* w, size_t ld, int rows, const Value* values, size_t n, int dim,
                      float* acc, size_t acc_stride, Convert convert) {
  for (size_t t = 0; t < n; ++t) {
    const Value* v = values + t * dim;
    for (int r = 0; r < rows; ++r) {
      const float wt = w[r * ld + t];
      if (!Fused && wt == 0.0f) continue;
      float* a = acc + r * acc_stride;
      for (int j = 0; j < dim; ++j) {
        if constexpr (Fused) a[j] = std::fma(wt, convert(v[j]), a[j]);
        else a[j] += wt * convert(v[j]);
      }
    }
  }
}

float convert_half(uint16_t h) { return half_to_float(h); }
float convert_float(float f) { return f; }

void dots_f16(const float* q, size_t q_stride, int rows, const uint16_t* keys, size_t n, int dim,
              float* scores, size_t ld) {
  dots_dense<false>(q, q_stride, rows, keys, n, dim, scores, ld, convert_half);
}
void dots_f32(const float* q, size_t q_stride, int rows, const float* keys, size_t n, int dim,
              float* scores, size_t ld) {
  dots_dense<false>(q, q_stride, rows, keys, n, dim, scores, ld, convert_float);
}
void accumulate_f16(const float* w, size_t ld, int rows, const uint16_t* values, size_t n,
                    int dim, float* acc, size_t acc_stride) {
  accumulate_dense<false>(w, ld, rows, values, n, dim, acc, acc_stride, convert_half);
}
void accumulate_f32(const float* w, size_t ld, int rows, const float* values, size_t n, int dim,
                    float* acc, size_t acc_stride) {
  accumulate_dense<false>(w, ld, rows, values, n, dim, acc, acc_stride, convert_float);
}
void prefill_dots_f16(const float* q, size_t q_stride, int rows, const uint16_t* keys, size_t n, int dim,
                      float* scores, size_t ld) {
  dots_dense<true>(q, q_stride, rows, keys, n, dim, scores, ld, convert_half);
}
void prefill_dots_f32(const float* q, size_t q_stride, int rows, const float* keys, size_t n, int dim,
                      float* scores, size_t ld) {
  dots_dense<true>(q, q_stride, rows, keys, n, dim, scores, ld, convert_float);
}
void prefill_accumulate_f16(const float* w, size_t ld, int rows, const uint16_t* values, size_t n, int dim,
                            float* acc, size_t acc_stride) {
  accumulate_dense<true>(w, ld, rows, values, n, dim, acc, acc_stride, convert_half);
}
void prefill_accumulate_f32(const float* w, size_t ld, int rows, const float* values, size_t n, int dim,
                            float* acc, size_t acc_stride) {
  accumulate_dense<true>(w, ld, rows, values, n, dim, acc, acc_stride, convert_float);
}

void group_decode(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& group, float* out,
                  size_t ld) {
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* codes = records + t * code_size + group.offset;
    for (int j = 0; j < group.padded_dims(); ++j) {
      out[t * ld + j] = j < group.dims ? group.table[read_code(codes, j, group.bits)] : 0.0f;
    }
  }
}

void group_dots(const float* q, size_t q_stride, int rows, const uint8_t* records,
                size_t code_size, size_t n, const CodeGroup& group, float* scores, size_t ld,
                bool add) {
  float decoded[8192];
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* codes = records + t * code_size + group.offset;
    for (int j = 0; j < group.dims; ++j) decoded[j] = group.table[read_code(codes, j, group.bits)];
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + r * q_stride;
      float dot = 0.0f;
      for (int j = 0; j < group.dims; ++j) dot += qr[j] * decoded[j];
      scores[r * ld + t] = add ? scores[r * ld + t] + dot : dot;
    }
  }
}

void group_accumulate(const float* w, size_t ld, int rows, const uint8_t* records,
                      size_t code_size, size_t n, const CodeGroup& group, float* acc,
                      size_t acc_stride) {
  float decoded[8192];
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* codes = records + t * code_size + group.offset;
    for (int j = 0; j < group.dims; ++j) decoded[j] = group.table[read_code(codes, j, group.bits)];
    for (int r = 0; r < rows; ++r) {
      const float wt = w[r * ld + t];
      if (wt == 0.0f) continue;
      float* a = acc + r * acc_stride;
      for (int j = 0; j < group.dims; ++j) a[j] += wt * decoded[j];
    }
  }
}

void softmax_update(float* scores, size_t ld, int rows, size_t n, const size_t* visible,
                    const size_t* hidden, float scale, float softcap, float* m, float* l, float* acc,
                    size_t acc_stride, size_t acc_width) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < rows; ++r) {
    float* s = scores + r * ld;
    const size_t vis = std::min(visible[r], n);
    const size_t hid = hidden == nullptr ? 0 : std::min(hidden[r], vis);
    if (hid == vis) {
      std::fill(s, s + n, 0.0f);
      continue;
    }
    float block_max = kNegInf;
    for (size_t t = hid; t < vis; ++t) {
      float x = s[t] * scale;
      if (softcap > 0.0f) x = softcap * std::tanh(x / softcap);
      s[t] = x;
      block_max = std::max(block_max, x);
    }
    const float m_new = std::max(m[r], block_max);
    const float alpha = softmax_rescale(m[r], m_new);
    float sum = 0.0f;
    for (size_t t = hid; t < vis; ++t) {
      s[t] = std::exp(s[t] - m_new);
      sum += s[t];
    }
    std::fill(s, s + hid, 0.0f);
    std::fill(s + vis, s + n, 0.0f);
    if (alpha != 1.0f) {
      float* a = acc + r * acc_stride;
      for (size_t j = 0; j < acc_width; ++j) a[j] *= alpha;
    }
    l[r] = l[r] * alpha + sum;
    m[r] = m_new;
  }
}

void load_norms(const uint8_t* records, size_t stride, size_t n, bool fp32, float* out) {
  for (size_t t = 0; t < n; ++t) out[t] = load_norm(records + t * stride, fp32);
}

void scale_scores(float* scores, size_t ld, int rows, size_t n, const float* norm, const float* shift) {
  for (int r = 0; r < rows; ++r) {
    float* s = scores + r * ld;
    for (size_t t = 0; t < n; ++t) s[t] = std::fma(s[t], norm[t], shift[r]);
  }
}

// The integer kernels in coordinate order: exact int32 sums, then the float steps the SIMD
// kernels take (a multiply, or one fused multiply-add). value(codes, j): the integer centroid
// of coordinate j of a record's group (int8 table for 2-4 bits, int16 table for 8 bits).
int32_t centroid8(const uint8_t* codes, int j, const CodeGroup& g) { return g.table8[read_code(codes, j, g.bits)]; }
int32_t centroid16(const uint8_t* codes, int j, const CodeGroup& g) { return g.table16[codes[j]]; }

template <typename Q, int32_t (*value)(const uint8_t*, int, const CodeGroup&)>
void integer_dots(const Q* queries, size_t q_stride, int rows, const float* row_scale, const uint8_t* records,
                  size_t code_size, size_t n, const CodeGroup& group, float* scores, size_t ld, bool add) {
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* codes = records + t * code_size + group.offset;
    for (int r = 0; r < rows; ++r) {
      const Q* q = queries + r * q_stride;
      int32_t sum = 0;
      for (int j = 0; j < group.dims; ++j) sum += q[j] * value(codes, j, group);
      float& s = scores[r * ld + t];
      s = add ? std::fma(static_cast<float>(sum), row_scale[r], s) : static_cast<float>(sum) * row_scale[r];
    }
  }
}

template <typename W, int32_t (*value)(const uint8_t*, int, const CodeGroup&)>
void integer_accumulate(const W* w, size_t ld, int rows, const float* row_scale, const uint8_t* records,
                        size_t code_size, size_t n, const CodeGroup& group, float* acc, size_t acc_stride) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < group.dims; ++j) {
      int32_t sum = 0;
      for (size_t t = 0; t < n; ++t) sum += w[r * ld + t] * value(records + t * code_size + group.offset, j, group);
      float& a = acc[r * acc_stride + j];
      a = std::fma(row_scale[r], static_cast<float>(sum), a);
    }
  }
}

void int8_dots(const int8_t* q8, size_t q_stride, int rows, const float* row_scale, const uint8_t* records,
               size_t code_size, size_t n, const CodeGroup& group, float* scores, size_t ld, bool add) {
  integer_dots<int8_t, centroid8>(q8, q_stride, rows, row_scale, records, code_size, n, group, scores, ld, add);
}

void int16_dots(const int16_t* q16, size_t q_stride, int rows, const float* row_scale, const uint8_t* records,
                size_t code_size, size_t n, const CodeGroup& group, float* scores, size_t ld, bool add) {
  integer_dots<int16_t, centroid16>(q16, q_stride, rows, row_scale, records, code_size, n, group, scores, ld, add);
}

void int8_accumulate(const uint8_t* w8, size_t ld, int rows, const float* row_scale, const uint8_t* records,
                     size_t code_size, size_t n, const CodeGroup& group, float* acc, size_t acc_stride) {
  integer_accumulate<uint8_t, centroid8>(w8, ld, rows, row_scale, records, code_size, n, group, acc, acc_stride);
}

void int16_accumulate(const uint16_t* w16, size_t ld, int rows, const float* row_scale, const uint8_t* records,
                      size_t code_size, size_t n, const CodeGroup& group, float* acc, size_t acc_stride) {
  integer_accumulate<uint16_t, centroid16>(w16, ld, rows, row_scale, records, code_size, n, group, acc, acc_stride);
}

// int8_weights and int16_weights: `levels` steps; pad zeros to a multiple of `pad`.
template <typename T>
void integer_weights(const float* p, size_t ld, int rows, const float* norm, size_t n, T* w, float* scale,
                     float levels, size_t pad) {
  for (int r = 0; r < rows; ++r) {
    float wmax = 0.0f;
    bool finite = true;
    for (size_t t = 0; t < n; ++t) {
      const float x = p[r * ld + t] * norm[t];
      finite = finite && std::isfinite(x);
      wmax = std::max(wmax, x);
    }
    const float inv = finite && wmax > 0.0f ? levels / wmax : 0.0f;
    for (size_t t = 0; t < n; ++t) {
      w[r * ld + t] = finite ? static_cast<T>(std::trunc(std::fma(p[r * ld + t] * norm[t], inv, 0.5f))) : 0;
    }
    for (size_t t = n; t < (n + pad - 1) / pad * pad; ++t) w[r * ld + t] = 0;
    scale[r] = finite ? wmax / levels : std::numeric_limits<float>::quiet_NaN();
  }
}

void int16_weights(const float* p, size_t ld, int rows, const float* norm, size_t n, uint16_t* w16,
                   float* scale) {
  integer_weights(p, ld, rows, norm, n, w16, scale, static_cast<float>(kInt16Max), 2);
}

void int8_weights(const float* p, size_t ld, int rows, const float* norm, size_t n, int levels, uint8_t* w8,
                  float* scale) {
  integer_weights(p, ld, rows, norm, n, w8, scale, static_cast<float>(levels), 4);
}

std::atomic<const KernelTable*> g_override{nullptr};

}  // namespace

void finish_code_group(CodeGroup& group, size_t code_size) {
  // What the AVX2 kernels load for chunk c, from offset + c * bits: 1 or 2 bytes at 1 and 2
  // bits, 4 bytes at 3 and 4 bits, 4 + 4 bytes (the second at + bits / 2) at 5 to 8 bits.
  const size_t reach = group.bits >= 5 ? static_cast<size_t>(group.bits / 2 + 4)
                       : group.bits <= 2 ? static_cast<size_t>(group.bits) : 4u;
  int safe = 0;
  for (int c = 0; c < group.chunks(); ++c) {
    if (group.offset + static_cast<size_t>(c) * group.bits + reach <= code_size) safe = c + 1;
    else break;
  }
  group.safe_chunks = safe;
}

const KernelTable& scalar_kernel_table() {
  static const KernelTable table{"scalar",         dots_f16,       dots_f32,
                                 accumulate_f16,   accumulate_f32, group_dots,
                                 group_accumulate, softmax_update, load_norms,
                                 scale_scores,
                                 nullptr,          int8_dots,      int8_accumulate,
                                 int8_weights,     nullptr,        int16_dots,
                                 int16_accumulate, int16_weights,  nullptr,
                                 127,
                                 prefill_dots_f16, prefill_dots_f32,
                                 prefill_accumulate_f16, prefill_accumulate_f32,
                                 group_decode,     int8_dots,      int8_accumulate};
  return table;
}

const KernelTable& best_kernel_table() {
  static const KernelTable* best = [] {
    const bool no_vnni = std::getenv("TURBOKV_NO_VNNI") != nullptr;
    const bool no_avx512 = std::getenv("TURBOKV_NO_AVX512") != nullptr;
    const KernelTable* vnni = no_vnni || no_avx512 ? nullptr : vnni_kernel_table();
    if (vnni != nullptr) return vnni;
    const KernelTable* avx_vnni = no_vnni ? nullptr : avx_vnni_kernel_table();
    if (avx_vnni != nullptr) return avx_vnni;
    const KernelTable* avx2 = avx2_kernel_table();
    return avx2 != nullptr ? avx2 : &scalar_kernel_table();
  }();
  return *best;
}

void set_kernel_table_override(const KernelTable* table) { g_override.store(table); }

const KernelTable& active_kernel_table() {
  const KernelTable* table = g_override.load();
  return table != nullptr ? *table : best_kernel_table();
}

}  // namespace turbokv::attn
