// LloydMaxCodebook: the MSE-optimal scalar quantizer for one coordinate of a uniformly random
// unit vector in R^d.
//
// Such a coordinate has density f(x) = Gamma(d/2) / (sqrt(pi) Gamma((d-1)/2)) (1-x^2)^((d-3)/2)
// on [-1, 1]. The codebook is computed deterministically from (d, bits) by Lloyd iteration over
// this exact density; every integral is done in the angle t = asin(x), where
// f(x) dx = const * cos(t)^(d-2) dt is smooth and bounded for every d >= 2 (at d = 2 the density
// in x is the arcsine law, singular at +-1; in t it is uniform). Integration is composite
// Gauss-Legendre over each cell, no sampling. Centroids are symmetric about 0.
//
// Rotated coordinates of a unit vector are (nearly) independent with this marginal, so the
// expected squared error of a whole unit vector is unit_vector_mse() = d * E[(x - Q(x))^2].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace turbokv {

class LloydMaxCodebook {
 public:
  // Limits on the arguments of get().
  static constexpr int kMinDim = 2;
  static constexpr int kMaxDim = 1 << 16;
  static constexpr int kMinBits = 1;
  static constexpr int kMaxBits = 8;

  // The codebook for (dim, bits), computed on first use and cached for the process lifetime;
  // thread-safe. Throws turbokv::Error unless 2 <= dim <= 65536 and 1 <= bits <= 8.
  static const LloydMaxCodebook& get(int dim, int bits);

  int dim() const { return dim_; }
  int bits() const { return bits_; }
  int levels() const { return 1 << bits_; }

  // levels() centroids, ascending, c[i] == -c[levels()-1-i].
  std::span<const float> centroids() const { return centroids_; }
  // levels()-1 decision thresholds, boundaries[i] = (c[i] + c[i+1]) / 2.
  std::span<const float> boundaries() const { return boundaries_; }

  // d * E[(x - Q(x))^2] under the exact density (computed with the double-precision codebook).
  double unit_vector_mse() const { return unit_vector_mse_; }

  // Index of the nearest centroid: the number of boundaries strictly below x (x must not be NaN).
  uint8_t quantize(float x) const;

  // Hash of the float centroids and boundaries, to verify a saved cache decodes identically.
  uint64_t checksum() const;

  // Solves for the codebook (milliseconds); get() does this once per (dim, bits) and caches it.
  LloydMaxCodebook(int dim, int bits);

 private:
  int dim_;
  int bits_;
  std::vector<float> centroids_;
  std::vector<float> boundaries_;
  double unit_vector_mse_ = 0.0;
};

}  // namespace turbokv
