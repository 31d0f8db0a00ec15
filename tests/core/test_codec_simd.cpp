// The SIMD codec kernels against the scalar reference, on every Highway target compiled into the
// library and supported by this CPU (forced one at a time with hwy::SetSupportedTargetsForTest):
// quantize+pack and unpack+dequantize at every width 1-8, the Hadamard transform at power-of-two
// and 2^k*m sizes, and whole encode/decode through both codecs. Tolerance: bit-exact (the
// kernels do the same float operations per element as the reference).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/codec_reference.hpp"
#include "hwy/targets.h"
#include "kernels/codec_kernels.hpp"
#include "turbokv/codebook.hpp"
#include "turbokv/codec.hpp"
#include "turbokv/packing.hpp"

namespace turbokv {
namespace {

const size_t kSizes[] = {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 33, 64, 100, 128, 255, 256, 257, 300, 777};

class CodecSimd : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

std::string target_label(const ::testing::TestParamInfo<int64_t>& info) {
  std::string name = hwy::TargetName(info.param);
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

TEST_P(CodecSimd, DispatchesToTheForcedTarget) {
  EXPECT_EQ(kernels::codec_kernel_target_name(), std::string(hwy::TargetName(GetParam())));
}

TEST_P(CodecSimd, QuantizePackMatchesReference) {
  std::mt19937 rng(static_cast<uint32_t>(GetParam() % 100000) + 1);
  std::normal_distribution<float> normal;
  for (int bits = 1; bits <= 8; ++bits) {
    const auto& cb = LloydMaxCodebook::get(128, bits);
    for (size_t n : kSizes) {
      std::vector<float> y(n);
      for (auto& v : y) v = normal(rng) * 0.09f;
      // Exact boundary values, zero and far-out values exercise ties and the end cells.
      if (n > 4) {
        y[0] = cb.boundaries()[cb.boundaries().size() / 2];
        y[1] = 0.0f;
        y[2] = 5.0f;
        y[3] = -5.0f;
        y[4] = cb.boundaries().back();
      }
      const float inv_norm = n > 4 ? 1.0f : 1.3f;
      std::vector<uint8_t> want(packed_size(n, bits) + 8, 0xCD), got(want.size(), 0xCD);
      reference::quantize_pack(y.data(), n, inv_norm, cb.boundaries().data(), bits, want.data());
      kernels::quantize_pack(y.data(), n, inv_norm, cb.boundaries().data(), bits, got.data());
      ASSERT_EQ(got, want) << "bits " << bits << " n " << n;
    }
  }
}

TEST_P(CodecSimd, UnpackDequantizeMatchesReference) {
  std::mt19937 rng(static_cast<uint32_t>(GetParam() % 100000) + 2);
  for (int bits = 1; bits <= 8; ++bits) {
    const auto& cb = LloydMaxCodebook::get(64, bits);
    for (size_t n : kSizes) {
      std::vector<uint8_t> packed(packed_size(n, bits));
      for (auto& b : packed) b = static_cast<uint8_t>(rng());
      const float scale = 0.5f + static_cast<float>(rng() % 1000) / 100.0f;
      std::vector<float> want(n + 3, -7.0f), got(n + 3, -7.0f);
      reference::unpack_dequantize(packed.data(), n, bits, cb.centroids().data(), scale, want.data());
      kernels::unpack_dequantize(packed.data(), n, bits, cb.centroids().data(), scale, got.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << "bits " << bits << " n " << n;
    }
  }
}

TEST_P(CodecSimd, HadamardTransformMatchesReference) {
  std::mt19937 rng(static_cast<uint32_t>(GetParam() % 100000) + 3);
  std::normal_distribution<float> normal;
  for (int block : {1, 3, 5, 7}) {
    for (int log2_blocks = 0; log2_blocks <= 9; ++log2_blocks) {
      const size_t total = (size_t{1} << log2_blocks) * block;
      std::vector<float> x(total);
      for (auto& v : x) v = normal(rng);
      std::vector<float> want = x, got = x;
      const float scale = 1.0f / std::sqrt(float(size_t{1} << log2_blocks));
      reference::fwht_blocks(want.data(), log2_blocks, block, scale);
      kernels::fwht_blocks(got.data(), log2_blocks, block, scale);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), total * sizeof(float)), 0)
          << "block " << block << " log2 " << log2_blocks;
    }
  }
}

TEST_P(CodecSimd, WholeCodecsMatchScalarPath) {
  std::mt19937 rng(static_cast<uint32_t>(GetParam() % 100000) + 4);
  std::normal_distribution<float> normal;
  for (RotationKind rot : {RotationKind::hadamard, RotationKind::haar}) {
    for (int dim : {64, 80, 128}) {
      for (double bits : {2.0, 2.5, 3.0, 4.0, 6.0}) {
        CodecOptions o;
        o.dim = dim;
        o.bits = bits;
        o.rotation = rot;
        o.norm_correction = bits == 3.0;
        const TurboQuantMse mse(o);
        const TurboQuantProd prod(o);
        const size_t n = 37;
        std::vector<float> x(n * dim);
        for (auto& v : x) v = normal(rng);
        auto run = [&](bool scalar) {
          set_force_scalar_kernels(scalar);
          std::vector<uint8_t> mcodes(n * mse.code_size()), pcodes(n * prod.code_size());
          std::vector<float> mback(x.size()), pback(x.size());
          mse.encode(x.data(), n, mcodes.data());
          mse.decode(mcodes.data(), n, mback.data());
          prod.encode(x.data(), n, pcodes.data());
          prod.decode(pcodes.data(), n, pback.data());
          set_force_scalar_kernels(false);
          return std::make_tuple(mcodes, mback, pcodes, pback);
        };
        const auto simd = run(false);
        const auto scalar = run(true);
        ASSERT_EQ(std::get<0>(simd), std::get<0>(scalar)) << dim << " " << bits;
        ASSERT_EQ(std::get<1>(simd), std::get<1>(scalar)) << dim << " " << bits;
        ASSERT_EQ(std::get<2>(simd), std::get<2>(scalar)) << dim << " " << bits;
        ASSERT_EQ(std::get<3>(simd), std::get<3>(scalar)) << dim << " " << bits;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, CodecSimd, ::testing::ValuesIn(kernels::codec_kernel_targets()),
                         target_label);

TEST(CodecSimdTargets, AtLeastOneVectorTarget) {
  const auto targets = kernels::codec_kernel_targets();
  ASSERT_FALSE(targets.empty());
  std::string names;
  for (int64_t t : targets) names += std::string(hwy::TargetName(t)) + " ";
  std::printf("codec kernel targets on this CPU: %s\n", names.c_str());
#if defined(__x86_64__)
  // Every x86-64 CPU has at least SSSE3-class hardware in practice; the machine this project
  // is developed on has AVX2.
  EXPECT_GE(targets.size(), 2u);
#endif
}

}  // namespace
}  // namespace turbokv
