// TurboQuantMse / TurboQuantProd: record sizes and layout, distortion equal to the codebook's
// exact figure, norm handling (fp16/fp32, zero vectors, norm correction), half widths, the
// decode/decode_rotated relation, the unbiasedness of the Prod inner-product estimator (with the
// mse-only estimator shown biased in the same draws), determinism and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "turbokv/codec.hpp"
#include "turbokv/error.hpp"
#include "turbokv/packing.hpp"

namespace turbokv {
namespace {

std::vector<float> random_unit_vectors(size_t n, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n * d);
  for (size_t v = 0; v < n; ++v) {
    double sum = 0.0;
    for (int i = 0; i < d; ++i) {
      x[v * d + i] = normal(rng);
      sum += x[v * d + i] * x[v * d + i];
    }
    for (int i = 0; i < d; ++i) x[v * d + i] = static_cast<float>(x[v * d + i] / std::sqrt(sum));
  }
  return x;
}

double mean_squared_error(const std::vector<float>& a, const std::vector<float>& b, int d) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return sum / (a.size() / d);
}

CodecOptions options_for(int dim, double bits, RotationKind rot = RotationKind::hadamard) {
  CodecOptions o;
  o.dim = dim;
  o.bits = bits;
  o.rotation = rot;
  return o;
}

TEST(Codec, RecordSizesAndLayout) {
  const TurboQuantMse mse3(options_for(128, 3));
  EXPECT_EQ(mse3.code_size(), 50u);  // 48 bytes of codes + fp16 norm: 5.12x smaller than fp16
  EXPECT_GE(128.0 * 2 / mse3.code_size(), 5.1);
  EXPECT_EQ(mse3.layout().norm_offset, 48u);
  EXPECT_EQ(mse3.layout().dims_hi, 128);
  EXPECT_EQ(mse3.layout().dims_lo, 0);
  EXPECT_EQ(mse3.layout().qjl_offset, CodeLayout::npos);
  auto o = options_for(128, 3);
  o.fp32_norm = true;
  EXPECT_EQ(TurboQuantMse(o).code_size(), 52u);
  const TurboQuantMse half(options_for(128, 2.5));
  EXPECT_EQ(half.layout().bits_hi, 3);
  EXPECT_EQ(half.layout().bits_lo, 2);
  EXPECT_EQ(half.layout().dims_hi, 64);
  EXPECT_EQ(half.layout().group1_offset, 24u);
  EXPECT_EQ(half.layout().norm_offset, 40u);
  EXPECT_EQ(half.code_size(), 42u);
  EXPECT_DOUBLE_EQ(half.effective_bits(), 2.5);
  const TurboQuantProd prod(options_for(128, 3));
  EXPECT_EQ(prod.mse().code_size(), 34u);
  EXPECT_EQ(prod.layout().qjl_offset, 34u);
  EXPECT_EQ(prod.layout().residual_norm_offset, 50u);
  EXPECT_EQ(prod.code_size(), 52u);
  for (int bits = 1; bits <= 8; ++bits) {
    EXPECT_EQ(TurboQuantMse(options_for(96, bits)).code_size(), packed_size(96, bits) + 2);
  }
}

TEST(Codec, DistortionMatchesCodebookBothRotations) {
  const int d = 128;
  const size_t n = 1500;
  const auto x = random_unit_vectors(n, d, 11);
  std::vector<float> back(x.size());
  for (RotationKind rot : {RotationKind::hadamard, RotationKind::haar}) {
    for (int bits = 1; bits <= 5; ++bits) {
      const TurboQuantMse codec(options_for(d, bits, rot));
      std::vector<uint8_t> codes(n * codec.code_size());
      codec.encode(x.data(), n, codes.data());
      codec.decode(codes.data(), n, back.data());
      const double expected = codec.codebook(0).unit_vector_mse();
      EXPECT_NEAR(mean_squared_error(x, back, d), expected, 0.03 * expected)
          << rotation_kind_name(rot) << " bits " << bits;
    }
  }
}

TEST(Codec, HalfWidthsSitBetweenNeighbours) {
  const int d = 128;
  const size_t n = 1500;
  const auto x = random_unit_vectors(n, d, 12);
  std::vector<float> back(x.size());
  for (double bits : {1.5, 2.5, 3.5}) {
    const TurboQuantMse codec(options_for(d, bits));
    std::vector<uint8_t> codes(n * codec.code_size());
    codec.encode(x.data(), n, codes.data());
    codec.decode(codes.data(), n, back.data());
    // Half the coordinates at each width: the mean of the two codebooks' figures.
    const double expected = 0.5 * (codec.codebook(0).unit_vector_mse() + codec.codebook(1).unit_vector_mse());
    EXPECT_NEAR(mean_squared_error(x, back, d), expected, 0.03 * expected) << bits;
  }
}

TEST(Codec, ScalesWithNormAndDecodeEqualsInverseOfRotated) {
  const int d = 96;
  const size_t n = 50;
  auto x = random_unit_vectors(n, d, 13);
  for (size_t v = 0; v < n; ++v) {
    for (int i = 0; i < d; ++i) x[v * d + i] *= 0.01f + 30.0f * v;
  }
  for (RotationKind rot : {RotationKind::hadamard, RotationKind::haar}) {
    const TurboQuantMse codec(options_for(d, 4, rot));
    std::vector<uint8_t> codes(n * codec.code_size());
    codec.encode(x.data(), n, codes.data());
    std::vector<float> back(x.size()), rotated(x.size());
    codec.decode(codes.data(), n, back.data());
    codec.decode_rotated(codes.data(), n, rotated.data());
    codec.rotation().inverse(rotated.data(), rotated.data(), n);
    EXPECT_EQ(back, rotated);
    for (size_t v = 0; v < n; ++v) {
      double err = 0.0, norm = 0.0;
      for (int i = 0; i < d; ++i) {
        err += std::pow(x[v * d + i] - back[v * d + i], 2);
        norm += std::pow(x[v * d + i], 2);
      }
      EXPECT_LT(err / norm, 4 * codec.codebook(0).unit_vector_mse()) << v;
    }
  }
}

TEST(Codec, ZeroVectorsRoundTripToZero) {
  const int d = 64;
  std::vector<float> x(3 * d, 0.0f);
  x[d + 5] = 1.0f;  // a nonzero vector between two zero ones
  for (double bits : {1.0, 2.5, 4.0}) {
    const TurboQuantMse mse(options_for(d, bits));
    std::vector<uint8_t> codes(3 * mse.code_size());
    mse.encode(x.data(), 3, codes.data());
    std::vector<float> back(x.size(), 1.0f);
    mse.decode(codes.data(), 3, back.data());
    for (int i = 0; i < d; ++i) {
      EXPECT_EQ(back[i], 0.0f);
      EXPECT_EQ(back[2 * d + i], 0.0f);
    }
  }
  const TurboQuantProd prod(options_for(d, 3));
  std::vector<uint8_t> codes(3 * prod.code_size());
  prod.encode(x.data(), 3, codes.data());
  std::vector<float> back(x.size(), 1.0f);
  prod.decode(codes.data(), 3, back.data());
  for (int i = 0; i < d; ++i) EXPECT_EQ(back[i], 0.0f);
  EXPECT_EQ(prod.inner_product(x.data() + d, codes.data()), 0.0f);
}

TEST(Codec, NormCorrectionRestoresTheNorm) {
  const int d = 128;
  const size_t n = 200;
  const auto x = random_unit_vectors(n, d, 14);
  for (bool fp32 : {false, true}) {
    auto o = options_for(d, 2);
    o.norm_correction = true;
    o.fp32_norm = fp32;
    const TurboQuantMse nc(o);
    std::vector<uint8_t> codes(n * nc.code_size());
    nc.encode(x.data(), n, codes.data());
    std::vector<float> back(x.size());
    nc.decode(codes.data(), n, back.data());
    for (size_t v = 0; v < n; ++v) {
      double norm = 0.0;
      for (int i = 0; i < d; ++i) norm += double(back[v * d + i]) * back[v * d + i];
      EXPECT_NEAR(std::sqrt(norm), 1.0, fp32 ? 2e-6 : 1e-3);  // fp16 scale: 2^-11 rounding
    }
  }
  // Without correction the decoded norm is shrunk (centroids are conditional means).
  const TurboQuantMse plain(options_for(d, 2));
  std::vector<uint8_t> codes(n * plain.code_size());
  plain.encode(x.data(), n, codes.data());
  std::vector<float> back(x.size());
  plain.decode(codes.data(), n, back.data());
  double mean_norm = 0.0;
  for (size_t v = 0; v < n; ++v) {
    double norm = 0.0;
    for (int i = 0; i < d; ++i) norm += double(back[v * d + i]) * back[v * d + i];
    mean_norm += std::sqrt(norm) / n;
  }
  EXPECT_LT(mean_norm, 0.97);
}

TEST(Codec, RejectsNonFiniteAndFp16Overflow) {
  const int d = 32;
  const TurboQuantMse mse(options_for(d, 3));
  const TurboQuantProd prod(options_for(d, 3));
  std::vector<uint8_t> codes(2 * prod.code_size());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(2 * d, 0.5f);
    x[d + 7] = bad;
    EXPECT_THROW(mse.encode(x.data(), 2, codes.data()), Error);
    EXPECT_THROW(prod.encode(x.data(), 2, codes.data()), Error);
  }
  std::vector<float> big = random_unit_vectors(1, d, 15);
  for (auto& v : big) v *= 1.0e5f * std::sqrt(float(d));
  EXPECT_THROW(mse.encode(big.data(), 1, codes.data()), Error);
  auto o = options_for(d, 3);
  o.fp32_norm = true;
  const TurboQuantMse mse32(o);
  std::vector<uint8_t> codes32(mse32.code_size());
  mse32.encode(big.data(), 1, codes32.data());
  std::vector<float> back(d);
  mse32.decode(codes32.data(), 1, back.data());
  double norm = 0.0;
  for (float v : back) norm += double(v) * v;
  EXPECT_NEAR(std::sqrt(norm), 1.0e5 * std::sqrt(d), 0.1 * 1.0e5 * std::sqrt(d));
}

// The scale constant of the QJL term, proved by experiment: over many independent draws of the
// rotation and S (one seed each), the error <y, x_hat> - <y, x> of the Prod estimator has mean
// zero within 4 standard errors, while the mse-only estimator at the same total width is biased
// (it shrinks inner products) by many standard errors. y is correlated with x, <y, x> ~ 0.7.
TEST(Codec, ProdEstimatorIsUnbiasedAndMseIsNot) {
  const int d = 64;
  const int draws = 2000;
  const auto xs = random_unit_vectors(1, d, 21);
  auto ys = random_unit_vectors(1, d, 22);
  double norm = 0.0;
  for (int i = 0; i < d; ++i) {
    ys[i] = xs[i] + ys[i];
    norm += ys[i] * ys[i];
  }
  double exact = 0.0;
  for (int i = 0; i < d; ++i) {
    ys[i] = static_cast<float>(ys[i] / std::sqrt(norm));
    exact += double(ys[i]) * xs[i];
  }
  for (double bits : {2.0, 3.0}) {
    double prod_sum = 0, prod_sq = 0, mse_sum = 0, mse_sq = 0;
    for (int s = 0; s < draws; ++s) {
      auto o = options_for(d, bits);
      o.seed = 1000 + s;
      o.fp32_norm = true;
      const TurboQuantProd prod(o);
      std::vector<uint8_t> code(prod.code_size());
      prod.encode(xs.data(), 1, code.data());
      const double e = prod.inner_product(ys.data(), code.data()) - exact;
      prod_sum += e;
      prod_sq += e * e;
      const TurboQuantMse mse(o);  // same total width, all bits to the mse quantizer
      std::vector<uint8_t> mcode(mse.code_size());
      std::vector<float> back(d);
      mse.encode(xs.data(), 1, mcode.data());
      mse.decode(mcode.data(), 1, back.data());
      double ip = 0.0;
      for (int i = 0; i < d; ++i) ip += double(ys[i]) * back[i];
      mse_sum += ip - exact;
      mse_sq += (ip - exact) * (ip - exact);
    }
    const double prod_mean = prod_sum / draws;
    const double prod_se = std::sqrt((prod_sq / draws - prod_mean * prod_mean) / draws);
    const double mse_mean = mse_sum / draws;
    const double mse_se = std::sqrt((mse_sq / draws - mse_mean * mse_mean) / draws);
    std::printf("bits %.1f: prod mean error %.5f (se %.5f), mse-only mean error %.5f (se %.5f)\n", bits,
                prod_mean, prod_se, mse_mean, mse_se);
    EXPECT_LT(std::abs(prod_mean), 4 * prod_se) << "bits " << bits << " mean " << prod_mean;
    EXPECT_LT(mse_mean, -8 * mse_se) << "bits " << bits << " mean " << mse_mean;
    // A wrong scale (e.g. missing sqrt(pi/2), a 20% shrink of the QJL term) would be visible:
    // the standard error is far below the QJL term's typical size.
    EXPECT_LT(prod_se, 0.01);
  }
}

TEST(Codec, ProdDecodeMatchesInnerProductAndQjlProject) {
  const int d = 64;
  const size_t n = 20;
  const auto x = random_unit_vectors(n, d, 31);
  const auto q = random_unit_vectors(1, d, 32);
  const TurboQuantProd prod(options_for(d, 3.5, RotationKind::haar));
  std::vector<uint8_t> codes(n * prod.code_size());
  prod.encode(x.data(), n, codes.data());
  std::vector<float> back(x.size());
  prod.decode(codes.data(), n, back.data());
  for (size_t v = 0; v < n; ++v) {
    double ip = 0.0;
    for (int i = 0; i < d; ++i) ip += double(q[i]) * back[v * d + i];
    EXPECT_NEAR(prod.inner_product(q.data(), codes.data() + v * prod.code_size()), ip, 1e-4);
  }
  std::vector<float> s(d);
  prod.qjl_project(q.data(), s.data(), 1);
  for (int i = 0; i < d; ++i) {
    double expect = 0.0;
    for (int j = 0; j < d; ++j) expect += double(prod.qjl_matrix()[i * d + j]) * q[j];
    EXPECT_NEAR(s[i], expect, 1e-4);
  }
  EXPECT_DOUBLE_EQ(TurboQuantProd::qjl_scale(128), std::sqrt(M_PI / 2) / 128);
}

TEST(Codec, DeterministicFromSeed) {
  const int d = 128;
  const auto x = random_unit_vectors(10, d, 41);
  auto encode = [&](uint64_t seed, RotationKind rot) {
    auto o = options_for(d, 3, rot);
    o.seed = seed;
    const TurboQuantProd codec(o);
    std::vector<uint8_t> codes(10 * codec.code_size());
    codec.encode(x.data(), 10, codes.data());
    return codes;
  };
  for (RotationKind rot : {RotationKind::hadamard, RotationKind::haar}) {
    EXPECT_EQ(encode(5, rot), encode(5, rot));
    EXPECT_NE(encode(5, rot), encode(6, rot));
  }
}

TEST(Codec, RejectsBadArguments) {
  EXPECT_THROW(TurboQuantMse(options_for(1, 3)), Error);
  EXPECT_THROW(TurboQuantMse(options_for(0, 3)), Error);
  EXPECT_THROW(TurboQuantMse(options_for(128, 0)), Error);
  EXPECT_THROW(TurboQuantMse(options_for(128, 0.5)), Error);
  EXPECT_THROW(TurboQuantMse(options_for(128, 9)), Error);
  EXPECT_THROW(TurboQuantMse(options_for(128, 8.5)), Error);
  EXPECT_THROW(TurboQuantMse(options_for(128, 2.3)), Error);
  EXPECT_THROW(TurboQuantMse(options_for(128, std::nan(""))), Error);
  EXPECT_THROW(TurboQuantProd(options_for(128, 1)), Error);
  EXPECT_THROW(TurboQuantProd(options_for(128, 1.5)), Error);
  EXPECT_THROW(TurboQuantProd(options_for(128, 9)), Error);
  const TurboQuantMse mse(options_for(16, 2));
  EXPECT_THROW(mse.codebook(2), Error);
  std::vector<float> x(16 * 3);
  std::vector<uint8_t> codes(3 * mse.code_size());
  EXPECT_NO_THROW(mse.encode(std::span<const float>(x), std::span<uint8_t>(codes)));
  EXPECT_THROW(mse.encode(std::span<const float>(x.data(), 47), std::span<uint8_t>(codes)), Error);
  EXPECT_THROW(mse.encode(std::span<const float>(x), std::span<uint8_t>(codes.data(), codes.size() - 1)), Error);
  EXPECT_THROW(mse.decode(std::span<const uint8_t>(codes.data(), 2 * mse.code_size()), std::span<float>(x)), Error);
  EXPECT_THROW(mse.decode_rotated(std::span<const uint8_t>(codes), std::span<float>(x.data(), 32)), Error);
  const TurboQuantProd prod(options_for(16, 2));
  std::vector<uint8_t> pcodes(3 * prod.code_size());
  EXPECT_THROW(prod.encode(std::span<const float>(x), std::span<uint8_t>(codes)), Error);
  EXPECT_THROW(prod.decode(std::span<const uint8_t>(pcodes), std::span<float>(x.data(), 17)), Error);
  EXPECT_THROW(mse.encode(nullptr, 2, codes.data()), Error);
}

}  // namespace
}  // namespace turbokv
