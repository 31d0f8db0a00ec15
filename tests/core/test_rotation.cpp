// Rotations: orthogonality in float32 (max |R R^T - I| < 1e-5) for both kinds at power-of-two
// and non-power-of-two dims, forward/inverse batches and in-place use, determinism from the
// seed, the Hadamard structure, the Haar sign correction (E[R_ii] = 0, E[R_ij^2] = 1/d), caching
// and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "turbokv/error.hpp"
#include "turbokv/rotation.hpp"

namespace turbokv {
namespace {

double orthogonality_error(const std::vector<float>& r, int d) {
  double worst = 0.0;
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) {
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += static_cast<double>(r[i * d + k]) * r[j * d + k];
      worst = std::max(worst, std::abs(dot - (i == j ? 1.0 : 0.0)));
    }
  }
  return worst;
}

TEST(Rotation, OrthogonalInFloat32) {
  for (RotationKind kind : {RotationKind::haar, RotationKind::hadamard}) {
    for (int d : {2, 3, 8, 64, 80, 96, 112, 128, 256}) {
      const auto rot = make_rotation(kind, d, 42);
      ASSERT_EQ(rot->dim(), d);
      EXPECT_EQ(rot->kind(), kind);
      EXPECT_EQ(rot->seed(), 42u);
      EXPECT_LT(orthogonality_error(rot->matrix(), d), 1e-5) << rotation_kind_name(kind) << " " << d;
    }
  }
}

TEST(Rotation, ForwardInverseBatchesAndInPlace) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (RotationKind kind : {RotationKind::haar, RotationKind::hadamard}) {
    for (int d : {64, 96, 128}) {
      const auto rot = make_rotation(kind, d, 7);
      const std::vector<float> r = rot->matrix();
      const size_t n = 9;
      std::vector<float> x(n * d), y(n * d), back(n * d);
      for (auto& v : x) v = normal(rng);
      rot->forward(x.data(), y.data(), n);
      for (size_t v = 0; v < n; ++v) {
        for (int i = 0; i < d; ++i) {  // y = R x, checked against the dense matrix
          double expect = 0.0;
          for (int j = 0; j < d; ++j) expect += static_cast<double>(r[i * d + j]) * x[v * d + j];
          ASSERT_NEAR(y[v * d + i], expect, 1e-4);
        }
      }
      rot->inverse(y.data(), back.data(), n);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(back[i], x[i], 1e-4);
      std::vector<float> inplace = x;
      rot->forward(inplace.data(), inplace.data(), n);
      EXPECT_EQ(inplace, y);
      rot->inverse(inplace.data(), inplace.data(), n);
      EXPECT_EQ(inplace, back);
    }
  }
}

TEST(Rotation, DeterministicFromSeedAndCached) {
  for (RotationKind kind : {RotationKind::haar, RotationKind::hadamard}) {
    const auto a = make_rotation(kind, 128, 1);
    EXPECT_EQ(a, make_rotation(kind, 128, 1));  // cached instance
    const uint64_t sum = a->checksum();
    if (kind == RotationKind::haar) {
      EXPECT_EQ(HaarRotation(128, 1).checksum(), sum);
      EXPECT_EQ(HaarRotation(128, 1).dense(), static_cast<const HaarRotation&>(*a).dense());
    } else {
      EXPECT_EQ(HadamardRotation(128, 1).checksum(), sum);
    }
    EXPECT_NE(make_rotation(kind, 128, 2)->checksum(), sum);
    EXPECT_NE(make_rotation(kind, 128, 2)->matrix(), a->matrix());
  }
  EXPECT_NE(make_rotation(RotationKind::haar, 128, 1)->checksum(),
            make_rotation(RotationKind::hadamard, 128, 1)->checksum());
}

// Power of two: every entry is +-1/sqrt(d). d = 80 = 16 * 5: |R_(a,b),(a',b')| = |Q5[b][b']| / 4,
// the same for every block pair (a, a').
TEST(Rotation, HadamardStructure) {
  {
    const int d = 128;
    const auto r = make_rotation(RotationKind::hadamard, d, 3)->matrix();
    for (float v : r) ASSERT_NEAR(std::abs(v), 1.0 / std::sqrt(128.0), 1e-6);
  }
  {
    const int d = 80, m = 5;
    const HadamardRotation rot(d, 3);
    EXPECT_EQ(rot.block(), 5);
    EXPECT_EQ(rot.log2_blocks(), 4);
    const auto r = rot.matrix();
    for (int a = 0; a < 16; ++a) {
      for (int a2 = 0; a2 < 16; ++a2) {
        for (int b = 0; b < m; ++b) {
          for (int b2 = 0; b2 < m; ++b2) {
            ASSERT_NEAR(std::abs(r[(a * m + b) * d + a2 * m + b2]), std::abs(r[b * d + b2]), 1e-6);
          }
        }
      }
    }
  }
}

// Plain Householder QR makes R's diagonal one-signed, which biases Q's diagonal; with the sign
// correction Q is Haar: E[Q_ii] = 0 and E[Q_ij^2] = 1/d.
TEST(Rotation, HaarSignCorrectionMakesDiagonalUnbiased) {
  const int d = 4;
  const int seeds = 3000;
  double diag_sum = 0.0, square_sum = 0.0;
  for (int s = 0; s < seeds; ++s) {
    const HaarRotation rot(d, 1000 + s);
    for (int i = 0; i < d; ++i) {
      diag_sum += rot.dense()[i * d + i];
      square_sum += static_cast<double>(rot.dense()[i * d + (i + 1) % d]) * rot.dense()[i * d + (i + 1) % d];
    }
  }
  const double n = static_cast<double>(seeds) * d;
  // Q_ii has variance 1/d = 0.25: standard error of the mean 0.5 / sqrt(n) ~ 0.0046.
  EXPECT_NEAR(diag_sum / n, 0.0, 4 * 0.5 / std::sqrt(n));
  EXPECT_NEAR(square_sum / n, 1.0 / d, 0.02);
}

TEST(Rotation, RejectsBadArguments) {
  EXPECT_THROW(make_rotation(RotationKind::haar, 1, 0), Error);
  EXPECT_THROW(make_rotation(RotationKind::hadamard, 0, 0), Error);
  EXPECT_THROW(make_rotation(RotationKind::hadamard, -4, 0), Error);
  EXPECT_THROW(make_rotation(static_cast<RotationKind>(9), 8, 0), Error);
  EXPECT_THROW(parse_rotation_kind("dct"), Error);
  EXPECT_EQ(parse_rotation_kind("haar"), RotationKind::haar);
  EXPECT_EQ(parse_rotation_kind("hadamard"), RotationKind::hadamard);
}

}  // namespace
}  // namespace turbokv
