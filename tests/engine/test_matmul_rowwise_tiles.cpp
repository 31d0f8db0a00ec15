// matmul_rowwise's Q8_0 kernels against a scalar model of matvec's lanes: every kernel (scalar
// float, AVX2, 256-bit VNNI, the AVX-512 register tiles, matvec's 512-bit kernel) must give each
// row exactly the bits matvec gives it (the server's batch invariance rests on it), at odd
// sizes, on fresh random data with the integer extremes, fp16 subnormal scales and non-finite
// activations.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/matmul_kernels.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "turbokv/cpu_features.hpp"
#include "turbokv/half.hpp"
#include "test_util.hpp"

using turbokv::test::same_bits;

namespace turbokv::engine {
namespace {

// dot_q8_row_q8_0 (matmul_avx2.cpp) computed one lane at a time: each block of 32 gives eight
// int32 sums of four products; lane j of the even (odd) blocks' accumulator adds
// (dw * dx) * sum_j with one fused multiply-add; the result is hsum(even + odd) in
// avx2::hsum's order: (v0+v4 + v2+v6) + (v1+v5 + v3+v7).
float q8_0_lane_model(const uint8_t* w, const uint8_t* x, int64_t cols) {
  float acc[2][8] = {};
  for (int64_t b = 0; b < cols / 32; ++b) {
    const uint8_t* wb = w + b * 34;
    const uint8_t* xb = x + b * 34;
    uint16_t wh, xh;
    std::memcpy(&wh, wb, 2);
    std::memcpy(&xh, xb, 2);
    const float d = half_to_float(wh) * half_to_float(xh);
    for (int j = 0; j < 8; ++j) {
      int32_t sum = 0;
      for (int i = 0; i < 4; ++i) {
        sum += static_cast<int8_t>(wb[2 + 4 * j + i]) * static_cast<int8_t>(xb[2 + 4 * j + i]);
      }
      acc[b & 1][j] = std::fma(d, static_cast<float>(sum), acc[b & 1][j]);
    }
  }
  float v[8];
  for (int j = 0; j < 8; ++j) v[j] = acc[0][j] + acc[1][j];
  float s[4];
  for (int j = 0; j < 4; ++j) s[j] = v[j] + v[j + 4];
  return (s[0] + s[2]) + (s[1] + s[3]);
}

// Q8_0 weights with random codes (every third row drawn from the extremes -128, +-127, 0, +-1)
// and random fp16 scales, some of them subnormal.
std::vector<uint8_t> random_q8_0_weights(int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t stride = row_bytes(GgmlType::Q8_0, cols);
  std::vector<uint8_t> bytes(stride * static_cast<size_t>(rows));
  const int8_t extremes[] = {-128, -127, 127, 0, 1, -1};
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint8_t* block = bytes.data() + static_cast<size_t>(r) * stride + static_cast<size_t>(b) * 34;
      const float d = rng() % 17 == 0 ? 3e-6f : scale(rng);  // 3e-6 is an fp16 subnormal
      const uint16_t h = float_to_half(d);
      std::memcpy(block, &h, 2);
      for (int i = 0; i < 32; ++i) {
        const int8_t v = r % 3 == 0 ? extremes[rng() % 6] : static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
        block[2 + i] = static_cast<uint8_t>(v);
      }
    }
  }
  return bytes;
}

// Activations: normal values, a few blocks tiny (subnormal fp16 scales) or with large values
// (codes at +-127).
std::vector<float> random_activations(int64_t n, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = normal(rng);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const unsigned kind = rng() % 8;
    for (size_t i = 0; i < 32; ++i) {
      if (kind == 0) x[b * 32 + i] *= 1e-6f;
      if (kind == 1 && i % 3 == 0) x[b * 32 + i] = (i % 2 ? 1.0f : -1.0f) * 50.0f;
    }
  }
  return x;
}

struct KernelChoice {
  const char* name;
  bool vnni;
  bool avx512;     // the register tiles (batches of 8 and more)
  bool matvec512;  // matvec's 512-bit kernel (one activation, and batches below 8 by fours)
};

// The 256-bit AVX2 kernels; the 256-bit VNNI kernel with no AVX-512 allowed (its VEX form,
// AVX-VNNI, where the CPU has it: what an AVX-VNNI CPU without AVX-512 runs; AVX2 elsewhere); its
// EVEX form below 8 activations with the tiles from 8 on; then everything AVX-512 adds.
const KernelChoice kChoices[] = {{"avx2", false, false, false},
                                 {"avx-vnni", true, false, false},
                                 {"vnni256-evex", true, true, false},
                                 {"avx512", true, true, true}};

void use_kernels(const KernelChoice& k) {
  use_vnni_kernels(k.vnni);
  use_avx512_tile_kernel(k.avx512);
  use_avx512_matvec_kernel(k.matvec512);
}

class Q8_0Kernels : public ::testing::Test {
 protected:
  void TearDown() override {
    use_vnni_kernels(true);
    use_avx512_tile_kernel(true);
    use_avx512_matvec_kernel(true);
    force_scalar_kernels(false);
  }
};

TEST_F(Q8_0Kernels, LaneModelIsMatvecAndCloseToTheReference) {
  if (std::string(kernel_isa()) != "avx2") GTEST_SKIP() << "no AVX2 kernels on this machine";
  RecordProperty("avx512_matvec_available", detail::avx512_tile_available() ? "yes" : "no");
  std::mt19937 rng(101);
  ThreadPool pool(1);
  // matvec's 512-bit kernel (where the CPU has it) and the AVX2 one; odd and even block counts.
  for (const bool avx512 : {true, false}) {
    use_avx512_matvec_kernel(avx512);
    for (const int64_t cols : {32, 64, 96, 352, 1056, 2048}) {
      const int64_t rows = 19;
      const auto w = random_q8_0_weights(rows, cols, rng);
      const auto x = random_activations(1, cols, rng);
      std::vector<uint8_t> xq(row_bytes(GgmlType::Q8_0, cols));
      quantize_row(GgmlType::Q8_0, x.data(), cols, xq.data());
      std::vector<float> y(static_cast<size_t>(rows)), reference(y.size()), x_used(static_cast<size_t>(cols));
      const WeightMatrix wm{GgmlType::Q8_0, rows, cols, w.data()};
      matvec(wm, x.data(), y.data(), pool);
      dequantize_row({GgmlType::Q8_0, 1, cols, xq.data()}, 0, x_used.data());
      matvec_reference(wm, x_used.data(), reference.data());
      std::vector<float> w_row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        const float model = q8_0_lane_model(w.data() + static_cast<size_t>(r) * row_bytes(GgmlType::Q8_0, cols), xq.data(), cols);
        EXPECT_TRUE(same_bits({&model, 1}, {&y[static_cast<size_t>(r)], 1})) << "cols " << cols << " row " << r;
        dequantize_row(wm, r, w_row.data());
        double magnitude = 0;
        for (int64_t i = 0; i < cols; ++i) magnitude += std::fabs(static_cast<double>(w_row[i]) * x_used[i]);
        EXPECT_NEAR(model, reference[static_cast<size_t>(r)], 1e-5 * magnitude + 1e-7) << "cols " << cols << " row " << r;
      }
    }
  }
}

// Every batched kernel, at odd row, column and batch sizes (past one column chunk of the tile
// kernel, 512 columns, and with an odd block count), one and two threads.
TEST_F(Q8_0Kernels, EveryBatchedKernelGivesTheLaneModelsBits) {
  if (std::string(kernel_isa()) != "avx2") GTEST_SKIP() << "no AVX2 kernels on this machine";
  RecordProperty("avx512_tile_available", detail::avx512_tile_available() ? "yes" : "no");
  RecordProperty("vnni_available", detail::vnni_available() ? "yes" : "no");
  RecordProperty("avx_vnni_available", cpu_has_avx_vnni() ? "yes" : "no");
  std::mt19937 rng(202);
  ThreadPool pool1(1), pool2(2);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {5, 96}, {37, 352}, {70, 1056}, {9, 2080}}) {
    const size_t stride = row_bytes(GgmlType::Q8_0, cols);
    const auto w = random_q8_0_weights(rows, cols, rng);
    const WeightMatrix wm{GgmlType::Q8_0, rows, cols, w.data()};
    for (const int64_t n : {2, 4, 5, 7, 8, 13, 33}) {
      const auto x = random_activations(n, cols, rng);
      std::vector<uint8_t> xq(stride * static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) quantize_row(GgmlType::Q8_0, x.data() + t * cols, cols, xq.data() + t * stride);
      std::vector<float> expected(static_cast<size_t>(n * rows));
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          expected[t * rows + r] = q8_0_lane_model(w.data() + r * stride, xq.data() + t * stride, cols);
        }
      }
      for (const KernelChoice& k : kChoices) {
        use_kernels(k);
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::vector<float> y(expected.size(), NAN);
          matmul_rowwise(wm, x.data(), n, y.data(), *pool);
          EXPECT_TRUE(same_bits(y, expected))
              << k.name << " rows " << rows << " cols " << cols << " batch " << n << " threads " << pool->size();
          // matmul (the prefill product) takes the same kernels for Q8_0.
          std::vector<float> y2(expected.size(), NAN);
          matmul(wm, x.data(), n, y2.data(), *pool);
          EXPECT_TRUE(same_bits(y2, expected)) << k.name << " matmul batch " << n;
        }
      }
    }
  }
}

// The tile kernel called directly, at every batch size from 1 (matmul_rowwise takes it from 8
// activations on; below that only the padding of the last group of four is exercised).
TEST_F(Q8_0Kernels, TileKernelAloneGivesTheLaneModelsBitsAtEveryBatchSize) {
  if (!detail::avx512_tile_available()) GTEST_SKIP() << "no AVX-512 VNNI on this machine";
  std::mt19937 rng(505);
  ThreadPool pool(2);
  const int64_t rows = 23, cols = 608;  // 19 blocks: an odd count, past one column chunk
  const size_t stride = row_bytes(GgmlType::Q8_0, cols);
  const auto w = random_q8_0_weights(rows, cols, rng);
  for (int64_t n = 1; n <= 9; ++n) {
    const auto x = random_activations(n, cols, rng);
    std::vector<uint8_t> xq(stride * static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) quantize_row(GgmlType::Q8_0, x.data() + t * cols, cols, xq.data() + t * stride);
    std::vector<float> y(static_cast<size_t>(n * rows), NAN);
    detail::matmul_q8_0_avx512(w.data(), stride, static_cast<size_t>(rows), cols, xq.data(), stride,
                               static_cast<size_t>(n), y.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const float want = q8_0_lane_model(w.data() + r * stride, xq.data() + t * stride, cols);
        EXPECT_TRUE(same_bits({&want, 1}, {&y[t * rows + r], 1})) << "batch " << n << " act " << t << " row " << r;
      }
    }
  }
}

// Non-finite activations (an infinite value makes its block's scale infinite and the results
// inf or NaN): the batched kernels still give matvec's bits, row by row.
TEST_F(Q8_0Kernels, NonFiniteActivationsGiveMatvecsBits) {
  if (std::string(kernel_isa()) != "avx2") GTEST_SKIP() << "no AVX2 kernels on this machine";
  std::mt19937 rng(303);
  ThreadPool pool(2), pool1(1);
  const int64_t rows = 13, cols = 160;
  const auto w = random_q8_0_weights(rows, cols, rng);
  const WeightMatrix wm{GgmlType::Q8_0, rows, cols, w.data()};
  for (const int64_t n : {5, 9}) {  // below and at the tiles' batch
    auto x = random_activations(n, cols, rng);
    x[3] = INFINITY;
    x[cols + 40] = -INFINITY;
    x[2 * cols + 77] = NAN;
    for (const KernelChoice& k : kChoices) {
      use_kernels(k);
      std::vector<float> y(static_cast<size_t>(n * rows));
      matmul_rowwise(wm, x.data(), n, y.data(), pool);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<float> alone(static_cast<size_t>(rows));
        matvec(wm, x.data() + t * cols, alone.data(), pool1);
        EXPECT_TRUE(same_bits(alone, {y.data() + t * rows, static_cast<size_t>(rows)}))
            << k.name << " batch " << n << " row " << t;
      }
    }
  }
}

// The AVX2 activation quantizer against quantize_row (the scalar encoder), byte for byte: normal
// values, exact zeros, ties at .5 after scaling, fp16-subnormal and fp16-overflowing scales,
// infinities and NaNs inside blocks.
TEST(QuantizeQ8_0, Avx2GivesQuantizeRowsBytes) {
  if (std::string(kernel_isa()) != "avx2") GTEST_SKIP() << "no AVX2 kernels on this machine";
  std::mt19937 rng(404);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t cols : {32, 64, 96, 2080}) {
    for (int round = 0; round < 20; ++round) {
      std::vector<float> x(static_cast<size_t>(cols));
      for (auto& v : x) v = normal(rng);
      for (size_t b = 0; b < x.size() / 32; ++b) {
        float* block = x.data() + b * 32;
        switch (rng() % 9) {
          case 0: std::fill(block, block + 32, 0.0f); break;
          case 1: for (int i = 0; i < 32; ++i) block[i] *= 1e-7f; break;  // scale below fp16's normals
          case 2: for (int i = 0; i < 32; ++i) block[i] *= 1e7f; break;   // scale past fp16's range
          case 3: block[rng() % 32] = INFINITY; break;
          case 4: block[rng() % 32] = -INFINITY; block[rng() % 32] = NAN; break;
          case 5: block[rng() % 32] = NAN; break;
          case 6:  // ties: amax 127 makes inv 1, so k + 0.5 rounds to even
            block[0] = 127.0f;
            for (int i = 1; i < 32; ++i) block[i] = static_cast<float>(static_cast<int>(rng() % 200) - 100) + 0.5f;
            break;
          case 7: for (int i = 0; i < 32; ++i) block[i] = -0.0f; break;
          default: break;
        }
      }
      std::vector<uint8_t> want(row_bytes(GgmlType::Q8_0, cols)), got(want.size(), 0xAB);
      quantize_row(GgmlType::Q8_0, x.data(), cols, want.data());
      detail::quantize_row_q8_0_avx2(x.data(), cols, got.data());
      ASSERT_EQ(want, got) << "cols " << cols << " round " << round;
    }
  }
}

}  // namespace
}  // namespace turbokv::engine
