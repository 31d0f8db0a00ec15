// TurboQuant vector codecs (Zandieh et al., "TurboQuant: Online Vector Quantization with
// Near-optimal Distortion Rate", ICLR 2026).
//
// TurboQuantMse:  x -> (s, idx) with y = R x / ||x||, idx_i = Q(y_i) (Lloyd-Max codebook of the
//                 coordinate marginal), s = ||x|| (or, with norm_correction, ||x|| / ||c[idx]||
//                 so the decoded vector has exactly the input's norm).
//                 decode: x_hat = s * R^T c[idx].
// TurboQuantProd: (bits-1)-bit TurboQuantMse, then in the ROTATED basis the residual
//                 r = R x - s c[idx] is sketched by 1-bit QJL: sign(S r) for a seeded standard
//                 Gaussian S (dim x dim), plus gamma = ||r||. For a query q with y_q = R q:
//                   <q, x> ~= s <y_q, c[idx]> + gamma * sqrt(pi/2)/dim * <S y_q, sign(S r)>
//                 which is unbiased over S (E[sign(<s_i, r>) s_i] = sqrt(2/pi) r / ||r||).
//                 decode_rotated() = s c[idx] + gamma sqrt(pi/2)/dim S^T sign(S r), so
//                 <q, decode(code)> equals the estimate up to float rounding.
//                 (S acts on the rotated residual: R is orthogonal and S Gaussian, so S R is the
//                 same distribution as S and the paper's estimator is unchanged.)
//
// Record byte layout (one vector = code_size() bytes, no padding, no alignment requirement):
//   [group0_offset] packed_size(dims_hi, bits_hi) bytes: rotated coordinates 0..dims_hi-1,
//                   Lloyd-Max indices at bits_hi bits, LSB-first bit stream (packing.hpp)
//   [group1_offset] packed_size(dims_lo, bits_lo) bytes: coordinates dims_hi..dim-1 at bits_lo
//                   (absent, 0 bytes, for integer widths: dims_lo == 0)
//   [norm_offset]   the decode scale s: IEEE fp16 (default) or fp32, little-endian
//   Prod only, after the embedded mse record (so bytes [0, mse().code_size()) ARE an mse record):
//   [qjl_offset]    packed_size(dim, 1) bytes: bit i = 1 iff (S r)_i >= 0, LSB-first
//   [residual_norm_offset] gamma = ||r||, fp16 or fp32 like the norm
// Example, dim 128, 3-bit mse, fp16: 48 bytes of codes + 2 bytes of norm = 50 bytes (5.12x
// smaller than fp16). 3-bit prod: 32 (2-bit codes) + 2 + 16 (signs) + 2 = 52 bytes.
//
// Fractional widths: bits = b + 0.5 splits the rotated coordinates into two fixed groups, the
// first dim/2 (rounded down) at b+1 bits and the rest at b bits, each with its own codebook.
//
// Input policy: NaN or Inf anywhere in a vector -> turbokv::Error (nothing is written for the
// batch's later vectors). With fp16 norms, a vector whose norm (or scale) exceeds the fp16 range
// -> turbokv::Error (use fp32_norm); norms below ~6e-8 round to zero (decode to zero). The zero
// vector encodes to scale 0 and decodes to exactly zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "turbokv/codebook.hpp"
#include "turbokv/rotation.hpp"

namespace turbokv {

struct CodecOptions {
  int dim = 128;
  double bits = 4;  // 1..8 in steps of 0.5 (mse); 2..8 for prod
  RotationKind rotation = RotationKind::hadamard;
  uint64_t seed = 0x7475726b6f6b76ULL;
  bool fp32_norm = false;        // default: norms stored as fp16
  bool norm_correction = false;  // store the scale that makes ||decode(x)|| == ||x||
};

struct CodeLayout {
  static constexpr size_t npos = static_cast<size_t>(-1);
  int dim = 0;
  int bits_hi = 0, dims_hi = 0;
  int bits_lo = 0, dims_lo = 0;
  size_t group0_offset = 0, group1_offset = 0;
  size_t qjl_offset = npos;
  size_t norm_offset = 0;
  bool fp32_norm = false;
  size_t residual_norm_offset = npos;
  size_t code_size = 0;
};

// Reads/writes a norm field of a record as the layout stores it (fp16 or fp32).
float load_norm(const uint8_t* field, bool fp32);
void store_norm(uint8_t* field, float value, bool fp32);  // throws if fp16 overflows

class TurboQuantMse {
 public:
  explicit TurboQuantMse(const CodecOptions& options);  // throws turbokv::Error on bad options
  const CodecOptions& options() const { return options_; }
  size_t code_size() const { return layout_.code_size; }
  const CodeLayout& layout() const { return layout_; }
  const Rotation& rotation() const { return *rotation_; }
  std::shared_ptr<const Rotation> rotation_ptr() const { return rotation_; }
  const LloydMaxCodebook& codebook(int group) const;  // 0 (hi) or 1 (lo; == 0 for integer bits)
  double effective_bits() const;  // coordinate bits per dimension, excluding the norm

  // x: [n][dim] float32, codes: [n][code_size()]. Non-finite input -> turbokv::Error.
  void encode(const float* x, size_t n, uint8_t* codes) const;
  void decode(const uint8_t* codes, size_t n, float* x) const;
  // Scale * centroids in the rotated basis (no inverse rotation); decode = R^T decode_rotated.
  void decode_rotated(const uint8_t* codes, size_t n, float* y) const;
  // Checked overloads: sizes must match ([n*dim] floats, [n*code_size()] bytes) or Error.
  void encode(std::span<const float> x, std::span<uint8_t> codes) const;
  void decode(std::span<const uint8_t> codes, std::span<float> x) const;
  void decode_rotated(std::span<const uint8_t> codes, std::span<float> y) const;

  // Encode from vectors already in the rotated basis (y = R x), with their norms known.
  // Used by TurboQuantProd; y is not modified.
  void encode_rotated(const float* y, const float* norms, size_t n, uint8_t* codes,
                      size_t record_stride) const;
  void decode_rotated_strided(const uint8_t* codes, size_t n, size_t record_stride, float* y) const;

 private:
  CodecOptions options_;
  CodeLayout layout_;
  std::shared_ptr<const Rotation> rotation_;
  const LloydMaxCodebook* codebooks_[2] = {nullptr, nullptr};
};

class TurboQuantProd {
 public:
  explicit TurboQuantProd(const CodecOptions& options);  // bits in [2, 8] (half steps)
  const CodecOptions& options() const { return options_; }
  size_t code_size() const { return layout_.code_size; }
  const CodeLayout& layout() const { return layout_; }
  const Rotation& rotation() const { return mse_.rotation(); }
  const LloydMaxCodebook& codebook(int group) const { return mse_.codebook(group); }
  const TurboQuantMse& mse() const { return mse_; }

  void encode(const float* x, size_t n, uint8_t* codes) const;
  void decode(const uint8_t* codes, size_t n, float* x) const;
  void decode_rotated(const uint8_t* codes, size_t n, float* y) const;
  void encode(std::span<const float> x, std::span<uint8_t> codes) const;
  void decode(std::span<const uint8_t> codes, std::span<float> x) const;
  void decode_rotated(std::span<const uint8_t> codes, std::span<float> y) const;

  // s = S y for the seeded Gaussian QJL matrix S (dim x dim), batch of n vectors [n][dim].
  void qjl_project(const float* y, float* s, size_t n) const;
  // The unbiased inner product estimate <q, x_hat> for one code (reference, scalar); q is in
  // the original basis.
  float inner_product(const float* q, const uint8_t* code) const;
  static constexpr double qjl_scale(int dim) { return 1.2533141373155002512 / dim; }  // sqrt(pi/2)/d
  const std::vector<float>& qjl_matrix() const { return qjl_; }  // S, row-major [dim][dim]

 private:
  CodecOptions options_;
  TurboQuantMse mse_;
  CodeLayout layout_;
  std::vector<float> qjl_;
};

}  // namespace turbokv
