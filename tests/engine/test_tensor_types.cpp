// Weight types: block layouts decoded against values worked out from the format definitions,
// quantize/dequantize error bounds, and every fast matvec/matmul path against the scalar
// reference on random data with odd row counts and ragged tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/matmul_kernels.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"
#include "turbokv/thread_pool.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;

namespace turbokv::engine {
namespace {

void put_half(std::vector<uint8_t>& bytes, size_t at, float value) {
  const uint16_t h = float_to_half(value);
  std::memcpy(bytes.data() + at, &h, 2);
}

TEST(TensorTypes, RowBytesFollowTheBlockSizes) {
  EXPECT_EQ(row_bytes(GgmlType::F32, 7), 28u);
  EXPECT_EQ(row_bytes(GgmlType::F16, 7), 14u);
  EXPECT_EQ(row_bytes(GgmlType::BF16, 3), 6u);
  EXPECT_EQ(row_bytes(GgmlType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(GgmlType::Q4_0, 64), 36u);
  EXPECT_EQ(row_bytes(GgmlType::Q4_K, 512), 288u);
  EXPECT_EQ(row_bytes(GgmlType::Q6_K, 256), 210u);
  EXPECT_THROW(row_bytes(GgmlType::Q8_0, 172), Error);  // stories260K's hidden size
  EXPECT_THROW(row_bytes(GgmlType::Q4_K, 32), Error);
  EXPECT_THROW(row_bytes(GgmlType::F32, -1), Error);
  EXPECT_TRUE(is_supported_type(14));
  EXPECT_FALSE(is_supported_type(16));  // IQ2_XXS: a real ggml type we do not read
  EXPECT_FALSE(is_supported_type(4));   // Q4_2: removed from ggml
  EXPECT_FALSE(is_supported_type(40));  // past every type this build knows
  EXPECT_STREQ(type_name(GgmlType::Q6_K), "Q6_K");
}

TEST(TensorTypes, Q8_0BlockIsScaleTimesSignedBytes) {
  std::vector<uint8_t> block(34);
  put_half(block, 0, 0.5f);
  for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(4 * i - 64));
  std::vector<float> out(32);
  dequantize_row({GgmlType::Q8_0, 1, 32, block.data()}, 0, out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * static_cast<float>(4 * i - 64)) << i;
}

TEST(TensorTypes, Q4_0BlockHasLowNibblesFirst) {
  std::vector<uint8_t> block(18);
  put_half(block, 0, 2.0f);
  for (int i = 0; i < 16; ++i) block[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  std::vector<float> out(32);
  dequantize_row({GgmlType::Q4_0, 1, 32, block.data()}, 0, out.data());
  EXPECT_EQ(out[0], -16.0f);   // code 0 -> (0 - 8) * 2
  EXPECT_EQ(out[15], 14.0f);   // code 15
  EXPECT_EQ(out[16], 14.0f);   // high nibble of byte 0 is 15
  EXPECT_EQ(out[31], -16.0f);  // high nibble of byte 15 is 0
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[i], 2.0f * static_cast<float>(i - 8));
    EXPECT_EQ(out[16 + i], 2.0f * static_cast<float>(7 - i));
  }
}

// Q4_K: d = 1, dmin = 0.5; sub-block scales and mins chosen so that the 6-bit packing uses
// the high bits; the 12 scale bytes below were packed by hand from these tables.
TEST(TensorTypes, Q4_KBlockFromTheDefinition) {
  const int sc[8] = {1, 2, 3, 4, 17, 33, 63, 5};
  const int mn[8] = {0, 1, 2, 3, 16, 20, 40, 7};
  const uint8_t packed_scales[12] = {0x41, 0x82, 0xC3, 0x04, 0x40, 0x41,
                                     0x82, 0x03, 0x01, 0x41, 0x8F, 0x75};
  std::vector<uint8_t> block(144);
  put_half(block, 0, 1.0f);
  put_half(block, 2, 0.5f);
  std::memcpy(block.data() + 4, packed_scales, 12);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) block[16 + 32 * chunk + l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  }
  std::vector<float> out(256);
  dequantize_row({GgmlType::Q4_K, 1, 256, block.data()}, 0, out.data());
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(out[64 * chunk + l], 1.0f * sc[2 * chunk] * (l % 16) - 0.5f * mn[2 * chunk]) << chunk << " " << l;
      EXPECT_EQ(out[64 * chunk + 32 + l], 1.0f * sc[2 * chunk + 1] * (15 - l % 16) - 0.5f * mn[2 * chunk + 1]);
    }
  }
  // A few worked by hand: sub-block 1 code 15 -> 2*15 - 0.5*1; sub-block 4 code 3 -> 17*3 - 8;
  // sub-block 5 code 0 -> -10; sub-block 6 code 7 -> 63*7 - 20; sub-block 7 code 10 -> 5*10 - 3.5.
  EXPECT_EQ(out[32], 29.5f);
  EXPECT_EQ(out[131], 43.0f);
  EXPECT_EQ(out[175], -10.0f);
  EXPECT_EQ(out[199], 421.0f);
  EXPECT_EQ(out[229], 46.5f);
}

// Q6_K: value e of the super-block uses scale e / 16 and 6-bit code q[e]; the block is packed
// here from the layout definition (ql low/high nibbles, qh two-bit fields).
TEST(TensorTypes, Q6_KBlockFromTheDefinition) {
  const int8_t scales[16] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -16};
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 7) % 64;
  std::vector<uint8_t> block(210, 0);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int* v = q + 128 * h + l;  // v[0], v[32], v[64], v[96]
      block[64 * h + l] = static_cast<uint8_t>((v[0] & 15) | ((v[64] & 15) << 4));
      block[64 * h + l + 32] = static_cast<uint8_t>((v[32] & 15) | ((v[96] & 15) << 4));
      block[128 + 32 * h + l] =
          static_cast<uint8_t>((v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
    }
  }
  std::memcpy(block.data() + 192, scales, 16);
  put_half(block, 208, 0.25f);
  std::vector<float> out(256);
  dequantize_row({GgmlType::Q6_K, 1, 256, block.data()}, 0, out.data());
  for (int e = 0; e < 256; ++e) EXPECT_EQ(out[e], 0.25f * scales[e / 16] * (q[e] - 32)) << e;
  EXPECT_EQ(out[0], -8.0f);     // code 0, scale 1
  EXPECT_EQ(out[100], 49.0f);   // code 60, scale 7
  EXPECT_EQ(out[255], -100.0f); // code 57, scale -16
}

TEST(TensorTypes, QuantizeRoundTripErrorIsBounded) {
  const int64_t cols = 256;
  const auto x = random_normal(cols, 1);
  std::vector<float> back(cols);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    std::vector<uint8_t> bytes(row_bytes(type, cols));
    quantize_row(type, x.data(), cols, bytes.data());
    dequantize_row({type, 1, cols, bytes.data()}, 0, back.data());
    for (int64_t i = 0; i < cols; ++i) {
      const float block_max = [&] {
        float m = 0;
        for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) m = std::max(m, std::fabs(x[j]));
        return m;
      }();
      float bound = 0.0f;
      switch (type) {
        case GgmlType::F32: bound = 0.0f; break;
        case GgmlType::F16: bound = std::fabs(x[i]) * 0x1p-11f + 1e-7f; break;
        case GgmlType::BF16: bound = std::fabs(x[i]) * 0x1p-8f; break;
        // half a step, plus the fp16 rounding of the scale (relative 2^-11 of the value)
        case GgmlType::Q8_0: bound = block_max / 127.0f * 0.5f + block_max * 0x1p-10f; break;
        // codes span [-8, 7] steps: the side opposite the extreme value clips at 7, one step
        case GgmlType::Q4_0: bound = block_max / 8.0f + block_max * 0x1p-9f; break;
        default: break;
      }
      ASSERT_LE(std::fabs(back[i] - x[i]), bound) << type_name(type) << " at " << i;
    }
  }
}

// Random encoded rows: random bytes, with every fp16 scale overwritten by a sane value.
std::vector<uint8_t> random_matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t stride = row_bytes(type, cols);
  std::vector<uint8_t> bytes(stride * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
    const auto values = random_normal(static_cast<size_t>(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r) quantize_row(type, values.data() + r * cols, cols, bytes.data() + r * stride);
    return bytes;
  }
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const size_t bb = block_bytes(type);
  for (size_t at = 0; at < bytes.size(); at += bb) {
    switch (type) {
      case GgmlType::Q8_0:
      case GgmlType::Q4_0: put_half(bytes, at, scale(rng)); break;
      case GgmlType::Q4_K:
        put_half(bytes, at, scale(rng));
        put_half(bytes, at + 2, scale(rng));
        break;
      case GgmlType::Q6_K: put_half(bytes, at + 208, scale(rng)); break;
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS: put_half(bytes, at, scale(rng)); break;
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
      case GgmlType::Q5_K:
        put_half(bytes, at, scale(rng));
        put_half(bytes, at + 2, scale(rng));
        break;
      case GgmlType::Q2_K:
        put_half(bytes, at + 80, scale(rng));
        put_half(bytes, at + 82, scale(rng));
        break;
      case GgmlType::Q3_K: put_half(bytes, at + 108, scale(rng)); break;
      default: break;
    }
  }
  return bytes;
}

struct Case {
  GgmlType type;
  int64_t cols;
};

// Odd block counts (11 blocks of 32, 3 super-blocks of 256) so no kernel can assume pairs.
const Case kCases[] = {{GgmlType::F32, 173},   {GgmlType::F32, 64},    {GgmlType::F16, 173},
                       {GgmlType::BF16, 173},  {GgmlType::Q8_0, 320},  {GgmlType::Q4_0, 320},
                       {GgmlType::Q4_K, 512},  {GgmlType::Q6_K, 512},  {GgmlType::Q4_1, 352},
                       {GgmlType::Q5_0, 352},  {GgmlType::Q5_1, 352},  {GgmlType::IQ4_NL, 352},
                       {GgmlType::Q2_K, 768},  {GgmlType::Q3_K, 768},  {GgmlType::Q5_K, 768},
                       {GgmlType::IQ4_XS, 768}};

// Whether matvec takes the Q8_0-activation path for this type on the current kernels.
bool uses_q8_path(GgmlType type) {
  if (!q8_activations() || std::string(kernel_isa()) != "avx2") return false;
  const detail::RowKernels k = detail::avx2_kernels(type);
  return k.dot_q8 != nullptr || k.dot_q8_sums != nullptr;
}

// |fast - reference| within float rounding of a sum of |w_i x_i| (one wrongly decoded value
// would move the result by ~1/cols of that sum, far above this bound).
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& magnitude, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_NEAR(got[r], want[r], 2e-5f * magnitude[r] + 1e-6f) << what << " row " << r;
  }
}

std::vector<float> abs_products(const WeightMatrix& w, const float* x) {
  std::vector<float> row(static_cast<size_t>(w.cols)), out(static_cast<size_t>(w.rows));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    double s = 0;
    for (int64_t i = 0; i < w.cols; ++i) s += std::fabs(row[i] * x[i]);
    out[r] = static_cast<float>(s);
  }
  return out;
}

// What the AVX2 path multiplies quantized rows with: x after a Q8_0 round trip.
std::vector<float> q8_round_trip(const std::vector<float>& x) {
  const auto cols = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(row_bytes(GgmlType::Q8_0, cols));
  quantize_row(GgmlType::Q8_0, x.data(), cols, q.data());
  std::vector<float> out(x.size());
  dequantize_row({GgmlType::Q8_0, 1, cols, q.data()}, 0, out.data());
  return out;
}

TEST(TensorTypes, MatvecMatchesReferenceOnEveryPath) {
  ThreadPool pool2(2), pool1(1);
  for (const auto& c : kCases) {
    const int64_t rows = 37;
    const auto bytes = random_matrix(c.type, rows, c.cols, 7);
    const WeightMatrix w{c.type, rows, c.cols, bytes.data()};
    const auto x = random_normal(static_cast<size_t>(c.cols), 11);
    std::vector<float> want(rows), got(rows);
    for (bool scalar : {false, true}) {
      for (bool q8 : {true, false}) {
        force_scalar_kernels(scalar);
        set_q8_activations(q8);
        const bool q8_path = uses_q8_path(c.type);
        // Every quantized type has an AVX2 Q8_0-activation kernel.
        if (q8 && std::string(kernel_isa()) == "avx2") {
          EXPECT_EQ(q8_path, block_size(c.type) > 1) << type_name(c.type);
        }
        const auto x_used = q8_path ? q8_round_trip(x) : x;
        matvec_reference(w, x_used.data(), want.data());
        const auto magnitude = abs_products(w, x_used.data());
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::fill(got.begin(), got.end(), NAN);
          matvec(w, x.data(), got.data(), *pool);
          SCOPED_TRACE(testing::Message() << type_name(c.type) << " cols " << c.cols << " isa " << kernel_isa()
                                          << " q8 activations " << q8_path << " threads " << pool->size());
          expect_close(got, want, magnitude, "matvec");
        }
      }
    }
    force_scalar_kernels(false);
    set_q8_activations(true);
  }
}

// The Q8_0-activation path stays close to the exact float product: the x rounding costs at most
// half a step (max|x| / 254 per block) per element.
TEST(TensorTypes, Q8ActivationErrorIsBounded) {
  ThreadPool pool(1);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_1,
                        GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                        GgmlType::Q5_K, GgmlType::IQ4_XS}) {
    const int64_t rows = 9, cols = 768;
    const auto bytes = random_matrix(type, rows, cols, 21);
    const WeightMatrix w{type, rows, cols, bytes.data()};
    const auto x = random_normal(static_cast<size_t>(cols), 23);
    std::vector<float> exact(rows), got(rows), row(cols);
    matvec_reference(w, x.data(), exact.data());
    matvec(w, x.data(), got.data(), pool);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, row.data());
      double bound = 0;
      for (int64_t b = 0; b < cols; b += 32) {
        float amax = 0, wsum = 0;
        for (int64_t i = b; i < b + 32; ++i) {
          amax = std::max(amax, std::fabs(x[i]));
          wsum += std::fabs(row[i]);
        }
        bound += wsum * (amax / 254.0f + amax * 0x1p-10f);
      }
      EXPECT_LE(std::fabs(got[r] - exact[r]), bound * 1.001 + 1e-6) << type_name(type) << " row " << r;
    }
  }
}

TEST(TensorTypes, MatmulMatchesPerTokenReference) {
  ThreadPool pool(2);
  for (const auto& c : kCases) {
    for (int64_t rows : {37, 8}) {
      const int64_t n = 5;
      const auto bytes = random_matrix(c.type, rows, c.cols, 3);
      const WeightMatrix w{c.type, rows, c.cols, bytes.data()};
      const auto x = random_normal(static_cast<size_t>(n * c.cols), 5);
      std::vector<float> y(static_cast<size_t>(n * rows), NAN);
      for (bool scalar : {false, true}) {
        force_scalar_kernels(scalar);
        matmul(w, x.data(), n, y.data(), pool);
        // Q8_0 weights on AVX2 multiply x's Q8_0 round trip (matmul takes matmul_rowwise).
        const bool q8_path = c.type == GgmlType::Q8_0 && uses_q8_path(c.type);
        for (int64_t t = 0; t < n; ++t) {
          const std::vector<float> x_row(x.begin() + t * c.cols, x.begin() + (t + 1) * c.cols);
          const auto x_used = q8_path ? q8_round_trip(x_row) : x_row;
          std::vector<float> want(rows);
          matvec_reference(w, x_used.data(), want.data());
          const auto magnitude = abs_products(w, x_used.data());
          std::vector<float> got(y.begin() + t * rows, y.begin() + (t + 1) * rows);
          SCOPED_TRACE(testing::Message() << type_name(c.type) << " rows " << rows << " token " << t
                                          << " isa " << kernel_isa());
          expect_close(got, want, magnitude, "matmul");
        }
      }
      force_scalar_kernels(false);
    }
  }
}

// Each fast row decoder (what matmul multiplies) gives the scalar reference's values, up to the
// order of the float multiply and add, on random rows of every type.
TEST(TensorTypes, FastDecodersMatchTheReference) {
  for (const auto& c : kCases) {
    const int64_t rows = 3;
    const auto bytes = random_matrix(c.type, rows, c.cols, 13);
    const WeightMatrix w{c.type, rows, c.cols, bytes.data()};
    const detail::RowKernels k = std::string(kernel_isa()) == "avx2" ? detail::avx2_kernels(c.type)
                                                                     : detail::scalar_kernels(c.type);
    std::vector<float> want(static_cast<size_t>(c.cols)), got(static_cast<size_t>(c.cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, want.data());
      k.decode(bytes.data() + static_cast<size_t>(r) * row_bytes(c.type, c.cols), c.cols, got.data());
      float scale = 0;
      for (float v : want) scale = std::max(scale, std::fabs(v));
      for (int64_t i = 0; i < c.cols; ++i) {
        ASSERT_NEAR(got[i], want[i], scale * 1e-6f) << type_name(c.type) << " row " << r << " value " << i;
      }
    }
  }
}

TEST(TensorTypes, BadShapesAreErrors) {
  ThreadPool pool(1);
  std::vector<uint8_t> bytes(68);
  float x[64] = {}, y[2];
  EXPECT_THROW(matvec({GgmlType::Q8_0, 1, 63, bytes.data()}, x, y, pool), Error);
  EXPECT_THROW(matvec({GgmlType::Q8_0, -1, 64, bytes.data()}, x, y, pool), Error);
  EXPECT_THROW(matvec({GgmlType::Q8_0, 1, 64, nullptr}, x, y, pool), Error);
  EXPECT_THROW(matmul({GgmlType::Q8_0, 1, 64, bytes.data()}, x, -2, y, pool), Error);
  EXPECT_THROW(dequantize_row({GgmlType::Q8_0, 2, 32, bytes.data()}, 2, y), Error);
}

}  // namespace
}  // namespace turbokv::engine
