// Random orthogonal rotations applied before scalar quantization (TurboQuant's "random
// rotation" step): after rotation every coordinate of a unit vector follows the same known
// marginal, whatever the input's structure, so one Lloyd-Max codebook fits every coordinate.
//
// Both kinds are deterministic functions of (dim, seed) through the project PRNG
// (include/turbokv/prng.hpp). Float rounding may still differ between builds; checksum() hashes
// what this build computed so a saved cache can verify it decodes identically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace turbokv {

enum class RotationKind { haar, hadamard };

const char* rotation_kind_name(RotationKind kind);          // "haar" / "hadamard"
RotationKind parse_rotation_kind(std::string_view name);   // throws turbokv::Error

// An orthogonal d x d matrix R; immutable and thread-safe.
class Rotation {
 public:
  virtual ~Rotation() = default;
  virtual int dim() const = 0;
  virtual RotationKind kind() const = 0;
  virtual uint64_t seed() const = 0;
  // Batch of n row vectors, contiguous [n][dim]; in == out allowed (other overlap is not).
  virtual void forward(const float* in, float* out, size_t n) const = 0;  // y = R x
  virtual void inverse(const float* in, float* out, size_t n) const = 0;  // x = R^T y
  // Hash of the matrix (or of the parameters that define it exactly) as computed here.
  uint64_t checksum() const { return checksum_; }
  // The dense matrix R, row-major [dim][dim] (for tests and tools; O(d^2) memory).
  std::vector<float> matrix() const;

 protected:
  uint64_t checksum_ = 0;
};

// Haar-distributed (uniform on O(d)) dense rotation: Q from the QR decomposition of a seeded
// d x d standard Gaussian matrix G = QR, with Q's columns multiplied by sign(R_ii) so the
// distribution is exactly Haar (plain Householder QR fixes the signs of R's diagonal, which
// biases Q). Computed in double, stored in float; forward/inverse are O(d^2) per vector.
class HaarRotation final : public Rotation {
 public:
  HaarRotation(int dim, uint64_t seed);  // throws turbokv::Error if dim < 2 or dim > 16384
  int dim() const override { return dim_; }
  RotationKind kind() const override { return RotationKind::haar; }
  uint64_t seed() const override { return seed_; }
  void forward(const float* in, float* out, size_t n) const override;
  void inverse(const float* in, float* out, size_t n) const override;
  const std::vector<float>& dense() const { return matrix_; }  // row-major R

 private:
  int dim_;
  uint64_t seed_;
  std::vector<float> matrix_;
};

// Randomized Hadamard rotation, O(d log d) per vector. Write d = 2^k * m with m odd.
//   R = (H_{2^k} (x) Q_m) * D
// D: seeded random +-1 signs; H_{2^k}: the Walsh-Hadamard matrix normalized by 2^(-k/2);
// Q_m: a seeded Haar m x m rotation (identity when m = 1, so for d a power of two this is the
// classic randomized Hadamard transform). Coordinate i = a*m + b (a < 2^k, b < m): Q_m mixes
// the m entries inside each contiguous block of m, then the fast Walsh-Hadamard transform mixes
// the 2^k blocks (butterflies on whole blocks). For d = 80, 96, 112 (m = 5, 3, 7) this costs
// O(d log d + d m) and every output coordinate depends on every input coordinate.
class HadamardRotation final : public Rotation {
 public:
  HadamardRotation(int dim, uint64_t seed);  // throws turbokv::Error if dim < 2 or odd part > 1024
  int dim() const override { return dim_; }
  RotationKind kind() const override { return RotationKind::hadamard; }
  uint64_t seed() const override { return seed_; }
  void forward(const float* in, float* out, size_t n) const override;
  void inverse(const float* in, float* out, size_t n) const override;
  int log2_blocks() const { return log2_blocks_; }
  int block() const { return block_; }

 private:
  int dim_;
  uint64_t seed_;
  int log2_blocks_;
  int block_;                  // m, the odd part of dim
  std::vector<float> signs_;   // D, dim entries of +-1
  std::vector<float> block_rotation_;  // Q_m row-major (empty when m == 1)
  float scale_;                // 2^(-k/2)
};

// Shared instances, cached per (kind, dim, seed) while any holder keeps one alive (a weak
// cache, so distinct seeds do not accumulate); thread-safe.
std::shared_ptr<const Rotation> make_rotation(RotationKind kind, int dim, uint64_t seed);

// Process-wide switch between the SIMD kernels (default) and the plain scalar reference loops
// of the codec (encode, decode, Hadamard transform). For benchmarks and tests; thread-safe.
void set_force_scalar_kernels(bool scalar);
bool force_scalar_kernels();

}  // namespace turbokv
