// LloydMaxCodebook: the distortion at d = 128 (1 bit from its closed form, 2-4 bits from an
// independent numerical Lloyd-Max solver written here), the ~4x
// fall per bit up to 8 bits, Lloyd optimality (centroid = conditional mean, checked by an
// independent Monte Carlo), symmetry, small d (d = 2 arcsine, d = 3 uniform), caching and
// argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <thread>
#include <vector>

#include "turbokv/codebook.hpp"
#include "turbokv/error.hpp"

namespace turbokv {
namespace {

// E|x_1| for x uniform on the unit sphere in R^d: Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)).
double mean_abs_coordinate(int d) {
  return std::exp(std::lgamma(d / 2.0) - std::lgamma((d + 1) / 2.0)) / std::sqrt(std::numbers::pi);
}

// An independent Lloyd-Max solver for one coordinate's density g(x) ~ (1 - x^2)^((d-3)/2):
// cumulative trapezoid integrals of g, x g and x^2 g on a fine uniform grid in x (not the
// library's Gauss-Legendre in the angle), interpolated at the cell boundaries; Lloyd iterations
// from uniform centroids until they move by less than 1e-13. Returns d * E[(x - Q(x))^2].
double independent_unit_vector_mse(int d, int bits) {
  const double lim = 0.6;  // at d = 128 the mass beyond |x| = 0.6 is below 1e-12
  const int n = 1 << 18;
  const double h = 2 * lim / n;
  std::vector<double> m0(n + 1, 0.0), m1(n + 1, 0.0), m2(n + 1, 0.0);
  auto g = [&](double x) { return std::pow(1.0 - x * x, (d - 3) / 2.0); };
  for (int i = 1; i <= n; ++i) {
    const double a = -lim + (i - 1) * h, b = a + h, ga = g(a), gb = g(b);
    m0[i] = m0[i - 1] + h / 2 * (ga + gb);
    m1[i] = m1[i - 1] + h / 2 * (a * ga + b * gb);
    m2[i] = m2[i - 1] + h / 2 * (a * a * ga + b * b * gb);
  }
  auto at = [&](const std::vector<double>& m, double x) {  // cumulative integral up to x
    if (x <= -lim) return 0.0;
    if (x >= lim) return m[n];
    const double pos = (x + lim) / h;
    const int i = std::min(static_cast<int>(pos), n - 1);
    return m[i] + (pos - i) * (m[i + 1] - m[i]);
  };
  const int levels = 1 << bits;
  std::vector<double> c(levels);
  for (int i = 0; i < levels; ++i) c[i] = (-1.0 + (2.0 * i + 1) / levels) * 0.2;
  std::vector<double> edges(levels + 1);
  for (int iter = 0; iter < 100000; ++iter) {
    edges[0] = -lim;
    edges[levels] = lim;
    for (int i = 1; i < levels; ++i) edges[i] = 0.5 * (c[i - 1] + c[i]);
    double moved = 0;
    for (int i = 0; i < levels; ++i) {
      const double mass = at(m0, edges[i + 1]) - at(m0, edges[i]);
      const double next = (at(m1, edges[i + 1]) - at(m1, edges[i])) / mass;
      moved = std::max(moved, std::fabs(next - c[i]));
      c[i] = next;
    }
    if (moved < 1e-13) break;
  }
  double err = 0;
  for (int i = 0; i < levels; ++i) {
    const double lo = edges[i], hi = edges[i + 1];
    err += (at(m2, hi) - at(m2, lo)) - 2 * c[i] * (at(m1, hi) - at(m1, lo)) +
           c[i] * c[i] * (at(m0, hi) - at(m0, lo));
  }
  return d * err / m0[n];
}

TEST(Codebook, DistortionAtDim128FromClosedFormAndIndependentIntegration) {
  // 1 bit: the centroids are +-E|x_1| (each half's conditional mean), so
  // d E[(x - Q(x))^2] = d (1/d - E|x_1|^2) = 1 - d E|x_1|^2, which tends to 1 - 2/pi.
  const double one_bit = 1.0 - 128 * std::pow(mean_abs_coordinate(128), 2);
  EXPECT_NEAR(LloydMaxCodebook::get(128, 1).unit_vector_mse(), one_bit, 1e-6);
  EXPECT_NEAR(LloydMaxCodebook::get(128, 1).centroids()[1], mean_abs_coordinate(128), 1e-7);
  EXPECT_NEAR(LloydMaxCodebook::get(65536, 1).unit_vector_mse(),
              1.0 - 65536 * std::pow(mean_abs_coordinate(65536), 2), 1e-6);
  EXPECT_NEAR(1.0 - 65536 * std::pow(mean_abs_coordinate(65536), 2), 1.0 - 2.0 / std::numbers::pi, 1e-5);
  EXPECT_NEAR(mean_abs_coordinate(3), 0.5, 1e-15);  // uniform on [-1, 1]: the formula's sanity
  // 1-4 bits against the independent solver (which must itself reproduce the closed form).
  EXPECT_NEAR(independent_unit_vector_mse(128, 1), one_bit, 1e-7);
  for (int bits = 1; bits <= 4; ++bits) {
    const double mine = independent_unit_vector_mse(128, bits);
    std::printf("[ figure ] d = 128, %d bit(s): unit-vector MSE %.7f (library %.7f)\n", bits, mine,
                LloydMaxCodebook::get(128, bits).unit_vector_mse());
    EXPECT_NEAR(LloydMaxCodebook::get(128, bits).unit_vector_mse(), mine, 1e-6 * mine) << bits;
  }
}

TEST(Codebook, DistortionFallsAboutFourTimesPerBit) {
  for (int dim : {8, 64, 128, 256}) {
    for (int bits = 2; bits <= 8; ++bits) {
      const double ratio = LloydMaxCodebook::get(dim, bits - 1).unit_vector_mse() /
                           LloydMaxCodebook::get(dim, bits).unit_vector_mse();
      EXPECT_GT(ratio, 3.0) << dim << " " << bits;
      EXPECT_LT(ratio, 4.6) << dim << " " << bits;
    }
  }
}

TEST(Codebook, ShapeIsSymmetricAscendingWithMidpointBoundaries) {
  for (int dim : {2, 3, 8, 128, 1000}) {
    for (int bits = 1; bits <= 8; ++bits) {
      const auto& cb = LloydMaxCodebook::get(dim, bits);
      ASSERT_EQ(cb.levels(), 1 << bits);
      ASSERT_EQ(cb.centroids().size(), size_t(cb.levels()));
      ASSERT_EQ(cb.boundaries().size(), size_t(cb.levels() - 1));
      const auto c = cb.centroids();
      for (int i = 0; i < cb.levels(); ++i) {
        EXPECT_EQ(c[i], -c[cb.levels() - 1 - i]);
        EXPECT_GT(c[i], -1.0f);
        EXPECT_LT(c[i], 1.0f);
        if (i > 0) {
          EXPECT_LT(c[i - 1], c[i]);
          EXPECT_NEAR(cb.boundaries()[i - 1], 0.5 * (c[i - 1] + c[i]), 1e-7);
        }
      }
    }
  }
}

// d = 3: a coordinate is uniform on [-1, 1]; Lloyd-Max is the uniform quantizer with
// error (2/L)^2 / 12 per coordinate.
TEST(Codebook, Dim3IsUniformQuantizer) {
  for (int bits = 1; bits <= 6; ++bits) {
    const auto& cb = LloydMaxCodebook::get(3, bits);
    const int levels = cb.levels();
    for (int i = 0; i < levels; ++i) {
      EXPECT_NEAR(cb.centroids()[i], -1.0 + (2.0 * i + 1.0) / levels, 1e-6);
    }
    const double step = 2.0 / levels;
    EXPECT_NEAR(cb.unit_vector_mse(), 3.0 * step * step / 12.0, 1e-9);
  }
}

// d = 2: x = cos(theta) with theta uniform (arcsine law, singular at +-1). 1 bit: centroids
// +-E|x| = +-2/pi, error per coordinate 1/2 - 4/pi^2.
TEST(Codebook, Dim2ArcsineOneBitClosedForm) {
  const auto& cb = LloydMaxCodebook::get(2, 1);
  EXPECT_NEAR(cb.centroids()[1], 2.0 / std::numbers::pi, 1e-7);  // float centroid
  EXPECT_NEAR(cb.unit_vector_mse(), 2.0 * (0.5 - 4.0 / (std::numbers::pi * std::numbers::pi)), 1e-9);
}

// Independent check of optimality and of the reported error: sample coordinates of uniform
// unit vectors (Gaussian direction), quantize, compare with the solver's integrals.
TEST(Codebook, MonteCarloAgreesAtSmallAndLargeDim) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (int dim : {2, 5, 8, 64}) {
    std::vector<double> v(dim);
    for (int bits : {1, 2, 3}) {
      const auto& cb = LloydMaxCodebook::get(dim, bits);
      const int samples = 200000 / dim + 20000;
      std::vector<double> sum(cb.levels(), 0.0), count(cb.levels(), 0.0);
      double err = 0.0, err2 = 0.0;
      int total = 0;
      for (int s = 0; s < samples; ++s) {
        double norm = 0.0;
        for (auto& x : v) {
          x = normal(rng);
          norm += x * x;
        }
        norm = std::sqrt(norm);
        for (int j = 0; j < std::min(dim, 8); ++j) {
          const double x = v[j] / norm;
          const int idx = cb.quantize(static_cast<float>(x));
          const double e = (x - cb.centroids()[idx]) * (x - cb.centroids()[idx]) * dim;
          err += e;
          err2 += e * e;
          sum[idx] += x;
          count[idx] += 1;
          ++total;
        }
      }
      const double mean = err / total;
      const double se = std::sqrt((err2 / total - mean * mean) / total);
      // Samples of one vector are correlated (within 8 coordinates); allow 6 standard errors.
      EXPECT_NEAR(mean, cb.unit_vector_mse(), 6 * se + 1e-4) << dim << " " << bits;
      for (int i = 0; i < cb.levels(); ++i) {
        if (count[i] < 2000) continue;
        EXPECT_NEAR(sum[i] / count[i], cb.centroids()[i], 0.02) << dim << " " << bits << " " << i;
      }
    }
  }
}

TEST(Codebook, QuantizeReturnsNearestCentroid) {
  const auto& cb = LloydMaxCodebook::get(128, 4);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-0.5f, 0.5f);
  for (int s = 0; s < 10000; ++s) {
    const float x = uni(rng);
    const int idx = cb.quantize(x);
    const float best = std::abs(x - cb.centroids()[idx]);
    for (float c : cb.centroids()) EXPECT_LE(best, std::abs(x - c) + 1e-7f);
  }
  EXPECT_EQ(cb.quantize(-1.0f), 0);
  EXPECT_EQ(cb.quantize(1.0f), 15);
}

TEST(Codebook, CachedAndThreadSafe) {
  std::vector<const LloydMaxCodebook*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { seen[t] = &LloydMaxCodebook::get(96, 5); });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(seen[t], seen[0]);
  EXPECT_EQ(&LloydMaxCodebook::get(96, 5), seen[0]);
  EXPECT_EQ(seen[0]->checksum(), LloydMaxCodebook(96, 5).checksum());
  EXPECT_NE(seen[0]->checksum(), LloydMaxCodebook::get(96, 4).checksum());
}

TEST(Codebook, RejectsBadArguments) {
  EXPECT_THROW(LloydMaxCodebook::get(1, 2), Error);
  EXPECT_THROW(LloydMaxCodebook::get(0, 2), Error);
  EXPECT_THROW(LloydMaxCodebook::get(128, 0), Error);
  EXPECT_THROW(LloydMaxCodebook::get(128, 9), Error);
  EXPECT_THROW(LloydMaxCodebook(128, -1), Error);
}

}  // namespace
}  // namespace turbokv
