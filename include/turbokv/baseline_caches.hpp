// Baseline KV caches: the quantizers people use today, implemented as KVCache classes so they sit
// in the same tables as TurboQuant, measured in the same run.
//
//   BlockQuantKVCache  llama.cpp's q8_0 / q4_0 cache types, optionally after a Hadamard rotation
//                      of each head row (q8_0h / q4_0h; llama.cpp rotates K/V by default).
//   KiviKVCache        KIVI (Liu et al. 2024): asymmetric 2/4-bit, keys per channel over groups
//                      of tokens, values per token over groups of channels, plus a residual of
//                      recent tokens kept in fp16.
//   AffineKVCache      mlx-lm's QuantizedKVCache: affine (scale + bias) groups of 64 along each
//                      head row, 4 or 8 bits.
//
// Every class reports nbytes() from what it really stores (codes, fp16 scales/zeros/biases,
// fp16 residual rows) and bits_per_value() = 8 * nbytes() / (2 * size * kv_heads * head_dim);
// for an empty cache bits_per_value() is the format's asymptotic figure, computed from its byte
// layout (q8_0: a 34-byte block per 32 values = 8.5).
//
// Byte layouts (all little-endian; fp16 = IEEE binary16 bits):
//   q8_0 block (34 bytes, 32 values): fp16 d, then 32 int8 q; x = d * q, d = amax / 127.
//   q4_0 block (18 bytes, 32 values): fp16 d, then 16 bytes; byte j holds value j in its low
//     nibble and value j + 16 in its high nibble, each q in [0, 15]; x = d * (q - 8), with
//     d = max / -8 where max is the signed value of largest magnitude (ggml's reference).
//     A head row of head_dim values is head_dim / 32 consecutive blocks.
//   KIVI / affine codes: an LSB-first bit stream (code i in stream bits [i*bits, (i+1)*bits),
//     stream bit k = bit k % 8 of byte k / 8), the layout of turbokv/packing.hpp.
//     KIVI key group (group_size tokens of one head): codes token-major ([token][channel]),
//     then per channel an fp16 scale and an fp16 zero (= the group minimum); x = q * s + z.
//     KIVI value token: codes [channel], per group_size channels an fp16 scale and zero.
//     Affine token row: codes [channel], per 64 channels an fp16 scale and bias; x = q * s + b.
//
// Shapes that do not fit a format are "not applicable": the constructor throws turbokv::Error
// whose message contains "not applicable"; shape_problem() tells in advance ("" = fits).
//
// Input policy: append() rejects NaN/Inf and values whose fp16 scale/zero/residual would
// overflow (|x| > 65504 for fp16-held parts) with turbokv::Error, leaving the cache unchanged.
// Thread-safety: as KVCache (one writer, many readers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "turbokv/kv_cache.hpp"

namespace turbokv {

class Rotation;  // rotation.hpp

// ---- llama.cpp q8_0 / q4_0 --------------------------------------------------------------

enum class BlockQuantFormat { q8_0, q4_0 };

inline constexpr int kGgmlBlockValues = 32;
inline constexpr size_t kQ8_0BlockBytes = 34;
inline constexpr size_t kQ4_0BlockBytes = 18;

// The scalar reference quantizers (ggml's quantize_row_*_ref semantics); n must be a multiple
// of 32; out holds n / 32 blocks.
void quantize_row_q8_0(const float* x, size_t n, uint8_t* out);
void dequantize_row_q8_0(const uint8_t* blocks, size_t n, float* x);
void quantize_row_q4_0(const float* x, size_t n, uint8_t* out);
void dequantize_row_q4_0(const uint8_t* blocks, size_t n, float* x);

struct BlockQuantOptions {
  BlockQuantFormat format = BlockQuantFormat::q8_0;
  bool hadamard = false;                          // rotate each head row before quantizing
  uint64_t rotation_seed = 0x7475726b6f6b76ULL;   // the randomized Hadamard's sign seed
};

class BlockQuantKVCache final : public KVCache {
 public:
  BlockQuantKVCache(int kv_heads, int head_dim, const BlockQuantOptions& options);
  ~BlockQuantKVCache() override;

  // "q8_0" or "q4_0" (the rotation is an option saved in the metadata).
  std::string class_name() const override;
  int kv_heads() const override { return kv_heads_; }
  int head_dim() const override { return head_dim_; }
  size_t size() const override { return size_; }
  void append(std::span<const float> keys, std::span<const float> values,
              size_t n_tokens) override;
  void fetch(std::span<float> keys, std::span<float> values) const override;
  size_t trim(size_t n) override;
  size_t nbytes() const override;
  CacheState save_state() const override;
  static std::unique_ptr<BlockQuantKVCache> from_state(const CacheState& state);

  const BlockQuantOptions& options() const { return options_; }
  double bits_per_value() const;
  size_t row_bytes() const { return row_bytes_; }   // one head row of one token
  // "" when head_dim fits (a positive multiple of 32).
  static std::string shape_problem(int head_dim, const BlockQuantOptions& options);

 private:
  void encode_rows(const float* rows, size_t n, uint8_t* out, std::vector<float>& scratch) const;

  int kv_heads_;
  int head_dim_;
  BlockQuantOptions options_;
  size_t row_bytes_;
  size_t size_ = 0;
  std::shared_ptr<const Rotation> rotation_;   // null unless options_.hadamard
  std::vector<std::vector<uint8_t>> keys_;     // per head: [size][row_bytes]
  std::vector<std::vector<uint8_t>> values_;
};

// ---- KIVI ----------------------------------------------------------------------------------

struct KiviOptions {
  int bits = 2;            // 2 or 4 (any of 1..8 works; KIVI uses 2 and 4)
  int group_size = 32;     // tokens per key group, channels per value group
  size_t residual = 32;    // recent tokens kept in fp16; a multiple of group_size (0 allowed)
};

class KiviKVCache final : public KVCache {
 public:
  KiviKVCache(int kv_heads, int head_dim, const KiviOptions& options);

  std::string class_name() const override { return "kivi"; }
  int kv_heads() const override { return kv_heads_; }
  int head_dim() const override { return head_dim_; }
  size_t size() const override { return value_quantized_ + value_tail_; }
  void append(std::span<const float> keys, std::span<const float> values,
              size_t n_tokens) override;
  void fetch(std::span<float> keys, std::span<float> values) const override;
  size_t trim(size_t n) override;
  size_t nbytes() const override;
  CacheState save_state() const override;
  static std::unique_ptr<KiviKVCache> from_state(const CacheState& state);

  const KiviOptions& options() const { return options_; }
  double bits_per_value() const;
  // Keys: the first key_groups() * group_size tokens are quantized, the rest (fewer than
  // key_flush_tokens()) wait in fp16 until a whole flush of groups is complete, as KIVI does.
  size_t key_groups() const { return key_groups_; }
  size_t key_residual_size() const { return key_tail_; }
  size_t key_flush_tokens() const;
  // Values: the newest min(size, residual) tokens are fp16, older ones quantized per token.
  size_t value_quantized_size() const { return value_quantized_; }
  size_t value_residual_size() const { return value_tail_; }
  static std::string shape_problem(int head_dim, const KiviOptions& options);

 private:
  void flush_keys();
  void flush_values();

  int kv_heads_;
  int head_dim_;
  KiviOptions options_;
  size_t key_group_code_bytes_;    // group_size * head_dim codes
  size_t value_code_bytes_;        // head_dim codes
  size_t key_groups_ = 0, key_tail_ = 0;
  size_t value_quantized_ = 0, value_tail_ = 0;
  // Per head.
  std::vector<std::vector<uint8_t>> key_codes_;     // [key_groups][key_group_code_bytes]
  std::vector<std::vector<uint16_t>> key_scales_;   // [key_groups][head_dim]
  std::vector<std::vector<uint16_t>> key_zeros_;
  std::vector<std::vector<uint16_t>> key_residual_; // [key_tail][head_dim] fp16
  std::vector<std::vector<uint8_t>> value_codes_;   // [value_quantized][value_code_bytes]
  std::vector<std::vector<uint16_t>> value_scales_; // [value_quantized][head_dim / group]
  std::vector<std::vector<uint16_t>> value_zeros_;
  std::vector<std::vector<uint16_t>> value_residual_;  // [value_tail][head_dim] fp16
};

// ---- mlx-lm affine groups ------------------------------------------------------------------

struct AffineOptions {
  int bits = 4;          // 2, 4 or 8 (mlx-lm's kv_bits)
  int group_size = 64;   // mlx-lm's kv_group_size
};

// mlx's affine quantizer for one group of `group` values: the endpoint of larger magnitude is
// represented exactly (it becomes the bias), scale = range / (2^bits - 1) (sign chosen so codes
// are in [0, 2^bits - 1]); scale and bias are returned as stored (fp16 bits).
void quantize_group_affine(const float* x, int group, int bits, uint8_t* codes,
                           uint16_t* scale_f16, uint16_t* bias_f16);

class AffineKVCache final : public KVCache {
 public:
  AffineKVCache(int kv_heads, int head_dim, const AffineOptions& options);

  std::string class_name() const override { return "affine"; }
  int kv_heads() const override { return kv_heads_; }
  int head_dim() const override { return head_dim_; }
  size_t size() const override { return size_; }
  void append(std::span<const float> keys, std::span<const float> values,
              size_t n_tokens) override;
  void fetch(std::span<float> keys, std::span<float> values) const override;
  size_t trim(size_t n) override;
  size_t nbytes() const override;
  CacheState save_state() const override;
  static std::unique_ptr<AffineKVCache> from_state(const CacheState& state);

  const AffineOptions& options() const { return options_; }
  double bits_per_value() const;
  static std::string shape_problem(int head_dim, const AffineOptions& options);

 private:
  int kv_heads_;
  int head_dim_;
  AffineOptions options_;
  size_t groups_per_row_;
  size_t code_bytes_;   // per head row
  size_t size_ = 0;
  // Per head, keys then values: codes [size][code_bytes], scales/biases [size][groups_per_row].
  std::vector<std::vector<uint8_t>> codes_[2];
  std::vector<std::vector<uint16_t>> scales_[2];
  std::vector<std::vector<uint16_t>> biases_[2];
};

// Registers "q8_0", "q4_0", "kivi" and "affine" with load_kv_cache() (cache_io.hpp) is done by
// the cache registry; this rebuilds any of them from a saved state (Error on other classes).
std::unique_ptr<KVCache> load_baseline_cache(const CacheState& state);

}  // namespace turbokv
