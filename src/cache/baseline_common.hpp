// Shared plumbing of the baseline caches (baseline_caches.hpp): input checks, fp16 fields,
// LSB-first code packing and CacheState blobs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "turbokv/half.hpp"
#include "turbokv/kv_cache.hpp"

namespace turbokv::baseline {

inline constexpr float kHalfMax = 65504.0f;

// The shape bounds every baseline constructor enforces (as DenseKVCache does).
inline void check_shape(const char* cls, int kv_heads, int head_dim) {
  TURBOKV_CHECK(kv_heads >= 1 && kv_heads <= 4096, "{}: kv_heads must be in [1, 4096], got {}",
                cls, kv_heads);
  TURBOKV_CHECK(head_dim >= 1 && head_dim <= 8192, "{}: head_dim must be in [1, 8192], got {}",
                cls, head_dim);
}

// Throws unless keys/values hold kv_heads * n_tokens * head_dim finite floats each; with
// half_range, also unless every |x| <= 65504 (parts of the format hold raw fp16 values).
inline void check_append_input(const char* cls, std::span<const float> keys,
                               std::span<const float> values, size_t n_tokens, int kv_heads,
                               int head_dim, bool half_range) {
  TURBOKV_CHECK(n_tokens <= (size_t{1} << 40) / (static_cast<size_t>(kv_heads) * head_dim),
                "{}: append of {} tokens is too large", cls, n_tokens);
  const size_t expected = static_cast<size_t>(kv_heads) * n_tokens * head_dim;
  TURBOKV_CHECK(keys.size() == expected && values.size() == expected,
                "{}: append got {} key and {} value floats, expected kv_heads*n_tokens*head_dim "
                "= {}",
                cls, keys.size(), values.size(), expected);
  for (int which = 0; which < 2; ++which) {
    const std::span<const float> data = which == 0 ? keys : values;
    for (size_t i = 0; i < data.size(); ++i) {
      const float x = data[i];
      TURBOKV_CHECK(std::isfinite(x), "{}: non-finite {} value {} at index {}", cls,
                    which == 0 ? "key" : "value", x, i);
      TURBOKV_CHECK(!half_range || std::fabs(x) <= kHalfMax,
                    "{}: {} value {} at index {} is outside the fp16 range this format stores",
                    cls, which == 0 ? "key" : "value", x, i);
    }
  }
}

inline void check_fetch_output(const char* cls, std::span<float> keys, std::span<float> values,
                               size_t expected) {
  TURBOKV_CHECK(keys.size() == expected && values.size() == expected,
                "{}: fetch needs {} floats for keys and for values, got {} and {}", cls,
                expected, keys.size(), values.size());
}

inline void store_half(uint8_t* p, float x) {
  const uint16_t h = float_to_half(x);
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}

inline float load_half(const uint8_t* p) {
  return half_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}


// LSB-first packing (the layout of turbokv/packing.hpp) of n codes of 1..8 bits; out must hold
// ceil(n * bits / 8) bytes and is fully overwritten.
inline size_t packed_bytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

inline void pack_lsb(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  std::memset(out, 0, packed_bytes(n, bits));
  size_t bit = 0;
  for (size_t i = 0; i < n; ++i, bit += static_cast<size_t>(bits)) {
    const unsigned v = codes[i] & ((1u << bits) - 1u);
    const size_t byte = bit / 8, shift = bit % 8;
    out[byte] = static_cast<uint8_t>(out[byte] | (v << shift));
    if (shift + static_cast<size_t>(bits) > 8) out[byte + 1] = static_cast<uint8_t>(v >> (8 - shift));
  }
}

inline unsigned code_at(const uint8_t* packed, size_t i, int bits) {
  const size_t bit = i * static_cast<size_t>(bits);
  const size_t byte = bit / 8, shift = bit % 8;
  unsigned v = packed[byte] >> shift;
  if (shift + static_cast<size_t>(bits) > 8) v |= static_cast<unsigned>(packed[byte + 1]) << (8 - shift);
  return v & ((1u << bits) - 1u);
}

// CacheState blobs from per-head vectors: shape [kv_heads, rows, row_elems].
template <typename T>
TensorBlob make_blob(const std::string& name, const std::string& dtype,
                     const std::vector<std::vector<T>>& per_head, size_t rows, size_t row_elems) {
  TensorBlob blob{name, dtype,
                  {static_cast<int64_t>(per_head.size()), static_cast<int64_t>(rows),
                   static_cast<int64_t>(row_elems)},
                  {}};
  const size_t head_bytes = rows * row_elems * sizeof(T);
  blob.data.resize(per_head.size() * head_bytes);
  for (size_t h = 0; h < per_head.size(); ++h) {
    if (head_bytes > 0) std::memcpy(blob.data.data() + h * head_bytes, per_head[h].data(), head_bytes);
  }
  return blob;
}

// Inverse of make_blob for a blob whose dtype/shape/size were already checked (find_tensor).
template <typename T>
void read_blob(const TensorBlob& blob, std::vector<std::vector<T>>& per_head, size_t rows,
               size_t row_elems) {
  const size_t head_elems = rows * row_elems;
  for (size_t h = 0; h < per_head.size(); ++h) {
    per_head[h].resize(head_elems);
    if (head_elems > 0) {
      std::memcpy(per_head[h].data(), blob.data.data() + h * head_elems * sizeof(T),
                  head_elems * sizeof(T));
    }
  }
}

// Throws if any fp16 field is Inf/NaN (a corrupt file must not decode to a silent NaN).
inline void check_halves_finite(const std::vector<std::vector<uint16_t>>& per_head,
                                const char* what) {
  for (const auto& v : per_head) {
    for (uint16_t h : v) TURBOKV_CHECK(half_is_finite(h), "cache state: non-finite fp16 in {}", what);
  }
}

}  // namespace turbokv::baseline
