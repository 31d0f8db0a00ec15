// The block types Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K and IQ4_XS: blocks packed here by
// hand from the layout definitions (tensor_types.hpp, after ggml's block_* structs) decode to
// the values the definitions give; every encoder round-trips within a bound derived from its
// scale choice; the type-name table; bad input is an Error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/tensor_types.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"

namespace turbokv::engine {
namespace {

void put_half(std::vector<uint8_t>& bytes, size_t at, float value) {
  const uint16_t h = float_to_half(value);
  std::memcpy(bytes.data() + at, &h, 2);
}

std::vector<float> decode(GgmlType type, const std::vector<uint8_t>& block, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row({type, 1, n, block.data()}, 0, out.data());
  return out;
}

// ggml's IQ4_NL table, written out again so the test does not read the one under test.
const int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

TEST(QuantTypes, SizesAndNames) {
  EXPECT_EQ(row_bytes(GgmlType::Q4_1, 64), 40u);
  EXPECT_EQ(row_bytes(GgmlType::Q5_0, 64), 44u);
  EXPECT_EQ(row_bytes(GgmlType::Q5_1, 64), 48u);
  EXPECT_EQ(row_bytes(GgmlType::IQ4_NL, 64), 36u);
  EXPECT_EQ(row_bytes(GgmlType::Q2_K, 512), 168u);
  EXPECT_EQ(row_bytes(GgmlType::Q3_K, 512), 220u);
  EXPECT_EQ(row_bytes(GgmlType::Q5_K, 512), 352u);
  EXPECT_EQ(row_bytes(GgmlType::IQ4_XS, 512), 272u);
  EXPECT_THROW(row_bytes(GgmlType::IQ4_XS, 32), Error);
  EXPECT_THROW(row_bytes(GgmlType::Q5_0, 48), Error);
  for (uint32_t raw : {3u, 6u, 7u, 10u, 11u, 13u, 20u, 23u}) {
    EXPECT_TRUE(is_supported_type(raw)) << raw;
    EXPECT_STREQ(type_name(static_cast<GgmlType>(raw)), ggml_type_name(raw));
  }
  EXPECT_STREQ(type_name(GgmlType::IQ4_XS), "IQ4_XS");
  EXPECT_STREQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_STREQ(ggml_type_name(15), "Q8_K");
  EXPECT_STREQ(ggml_type_name(29), "IQ1_M");
  EXPECT_STREQ(ggml_type_name(35), "TQ2_0");
  EXPECT_STREQ(ggml_type_name(39), "MXFP4");
  EXPECT_EQ(ggml_type_name(1000), nullptr);
  EXPECT_EQ(unsupported_type_message(16), "IQ2_XXS (type 16) is not supported");
  EXPECT_NE(unsupported_type_message(1000).find("type 1000"), std::string::npos);
}

TEST(QuantTypes, Q4_1IsScaleTimesNibblePlusMin) {
  std::vector<uint8_t> block(20);
  put_half(block, 0, 0.5f);
  put_half(block, 2, -3.0f);
  for (int i = 0; i < 16; ++i) block[4 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  const auto out = decode(GgmlType::Q4_1, block, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[i], 0.5f * i - 3.0f) << i;
    EXPECT_EQ(out[16 + i], 0.5f * (15 - i) - 3.0f) << i;
  }
  EXPECT_EQ(out[15], 4.5f);
  EXPECT_EQ(out[16], 4.5f);
}

// Packs 32 five-bit codes as Q5_0/Q5_1 store them: low nibbles in Q4_0 order, bit 4 of code i
// as bit i of the little-endian qh word.
void pack_q5(const int* codes, uint8_t* qh, uint8_t* qs) {
  uint32_t bits = 0;
  for (int i = 0; i < 32; ++i) bits |= static_cast<uint32_t>((codes[i] >> 4) & 1) << i;
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(bits >> (8 * i));
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>((codes[i] & 15) | ((codes[i + 16] & 15) << 4));
}

TEST(QuantTypes, Q5_0AndQ5_1TakeTheFifthBitFromQh) {
  int codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = (7 * i + 3) % 32;
  std::vector<uint8_t> q50(22), q51(24);
  put_half(q50, 0, 0.25f);
  pack_q5(codes, q50.data() + 2, q50.data() + 6);
  put_half(q51, 0, 0.5f);
  put_half(q51, 2, 1.0f);
  pack_q5(codes, q51.data() + 4, q51.data() + 8);
  const auto a = decode(GgmlType::Q5_0, q50, 32);
  const auto b = decode(GgmlType::Q5_1, q51, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(a[i], 0.25f * (codes[i] - 16)) << i;
    EXPECT_EQ(b[i], 0.5f * codes[i] + 1.0f) << i;
  }
  // By hand: code 3 -> -3.25; value 20 has code 143 % 32 = 15 -> -0.25; value 31 has 28 -> 3.
  EXPECT_EQ(a[0], -3.25f);
  EXPECT_EQ(a[20], -0.25f);
  EXPECT_EQ(a[31], 3.0f);
  // Literal bytes: qh = bits 0 and 16; qs[0] = 0x21 -> value 0 is code 17, value 16 code 18.
  std::vector<uint8_t> lit(22, 0);
  put_half(lit, 0, 1.0f);
  lit[2] = 0x01;
  lit[4] = 0x01;
  lit[6] = 0x21;
  const auto c = decode(GgmlType::Q5_0, lit, 32);
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_EQ(c[16], 2.0f);
  EXPECT_EQ(c[1], -16.0f);
  EXPECT_EQ(c[17], -16.0f);
}

TEST(QuantTypes, Iq4NlLooksUpTheNonLinearTable) {
  std::vector<uint8_t> block(18);
  put_half(block, 0, 2.0f);
  for (int i = 0; i < 16; ++i) block[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  const auto out = decode(GgmlType::IQ4_NL, block, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[i], 2.0f * kLevels[i]) << i;
    EXPECT_EQ(out[16 + i], 2.0f * kLevels[15 - i]) << i;
  }
  EXPECT_EQ(out[0], -254.0f);
  EXPECT_EQ(out[16], 226.0f);
  EXPECT_EQ(out[8], 2.0f);
}

// Q2_K / Q3_K: the 2-bit field of value e sits in qs[32 * (e / 128) + e % 32] at bit 2 * ((e / 32) % 4).
void pack_2bit(const int* fields, uint8_t* qs) {
  for (int e = 0; e < 256; ++e) qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(fields[e] << (2 * ((e / 32) % 4)));
}

TEST(QuantTypes, Q2_KFromTheDefinition) {
  std::vector<uint8_t> block(84, 0);
  int codes[256];
  for (int e = 0; e < 256; ++e) codes[e] = (5 * e + e / 7) % 4;
  for (int j = 0; j < 16; ++j) block[j] = static_cast<uint8_t>(((j + 1) & 15) | ((j / 2) << 4));
  pack_2bit(codes, block.data() + 16);
  put_half(block, 80, 0.5f);
  put_half(block, 82, 0.25f);
  const auto out = decode(GgmlType::Q2_K, block, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16;
    EXPECT_EQ(out[e], 0.5f * ((j + 1) & 15) * codes[e] - 0.25f * (j / 2)) << e;
  }
  // By hand: value 0 (code 0, scale byte 0x01) -> 0; value 37 (code (185 + 5) % 4 = 2,
  // sub-block 2: scale 3, min 1) -> 0.5 * 3 * 2 - 0.25 = 2.75; value 255 (code (1275 + 36) % 4
  // = 3, sub-block 15: scale 0, min 7) -> -1.75.
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[37], 2.75f);
  EXPECT_EQ(out[255], -1.75f);
}

TEST(QuantTypes, Q3_KFromTheDefinition) {
  std::vector<uint8_t> block(110, 0);
  int codes[256], stored[16];
  for (int e = 0; e < 256; ++e) codes[e] = (3 * e + 1) % 8 - 4;  // -4..3
  for (int j = 0; j < 16; ++j) stored[j] = (4 * j + 1) % 64;     // scale = stored - 32
  int fields[256];
  for (int e = 0; e < 256; ++e) {
    // The hmask bit set means "no -4": codes >= 0 store themselves with the bit set.
    if (codes[e] >= 0) block[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
    fields[e] = codes[e] >= 0 ? codes[e] : codes[e] + 4;
  }
  pack_2bit(fields, block.data() + 32);
  for (int j = 0; j < 16; ++j) {
    block[96 + j % 8] |= static_cast<uint8_t>((stored[j] & 15) << (4 * (j / 8)));
    block[96 + 8 + j % 4] |= static_cast<uint8_t>((stored[j] >> 4) << (2 * (j / 4)));
  }
  put_half(block, 108, 0.5f);
  const auto out = decode(GgmlType::Q3_K, block, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(out[e], 0.5f * (stored[e / 16] - 32) * codes[e]) << e;
  // By hand: value 0 has code -3 and scale 1 - 32 = -31 -> 46.5; value 255 has code
  // (766 % 8) - 4 = 2 and scale 61 - 32 = 29 -> 29.
  EXPECT_EQ(out[0], 46.5f);
  EXPECT_EQ(out[255], 29.0f);
}

// The same scales and mins as test_tensor_types' Q4_K block, whose packing was worked by hand.
TEST(QuantTypes, Q5_KIsQ4_KWithAFifthBit) {
  const int sc[8] = {1, 2, 3, 4, 17, 33, 63, 5};
  const int mn[8] = {0, 1, 2, 3, 16, 20, 40, 7};
  const uint8_t packed_scales[12] = {0x41, 0x82, 0xC3, 0x04, 0x40, 0x41, 0x82, 0x03, 0x01, 0x41, 0x8F, 0x75};
  int codes[256];
  for (int e = 0; e < 256; ++e) codes[e] = (7 * e) % 32;
  std::vector<uint8_t> block(176, 0);
  put_half(block, 0, 0.5f);
  put_half(block, 2, 1.0f);
  std::memcpy(block.data() + 4, packed_scales, 12);
  for (int e = 0; e < 256; ++e) {
    block[16 + e % 32] |= static_cast<uint8_t>((codes[e] >> 4) << (e / 32));
    block[48 + 32 * (e / 64) + e % 32] |= static_cast<uint8_t>((codes[e] & 15) << (4 * ((e / 32) % 2)));
  }
  const auto out = decode(GgmlType::Q5_K, block, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(out[e], 0.5f * sc[e / 32] * codes[e] - 1.0f * mn[e / 32]) << e;
  // By hand: value 200 (sub-block 6: scale 63, min 40; code 1400 % 32 = 24) -> 756 - 40.
  EXPECT_EQ(out[200], 716.0f);
}

TEST(QuantTypes, Iq4XsHasSixBitSubBlockScales) {
  const int ls[8] = {0, 1, 31, 32, 33, 47, 63, 20};  // scale = ls - 32
  int codes[256];
  for (int e = 0; e < 256; ++e) codes[e] = (3 * e + e / 32) % 16;
  std::vector<uint8_t> block(136, 0);
  put_half(block, 0, 0.5f);
  uint16_t high = 0;
  for (int j = 0; j < 8; ++j) {
    block[4 + j / 2] |= static_cast<uint8_t>((ls[j] & 15) << (4 * (j % 2)));
    high = static_cast<uint16_t>(high | ((ls[j] >> 4) << (2 * j)));
  }
  std::memcpy(block.data() + 2, &high, 2);
  for (int j = 0; j < 8; ++j) {
    for (int i = 0; i < 16; ++i) {
      block[8 + 16 * j + i] = static_cast<uint8_t>(codes[32 * j + i] | (codes[32 * j + i + 16] << 4));
    }
  }
  const auto out = decode(GgmlType::IQ4_XS, block, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(out[e], 0.5f * (ls[e / 32] - 32) * kLevels[codes[e]]) << e;
  // By hand: value 0 -> 0.5 * -32 * -127; value 255 (ls 20, code (765 + 7) % 16 = 4) -> 0.5 * -12 * -49.
  EXPECT_EQ(out[0], 2032.0f);
  EXPECT_EQ(out[255], 294.0f);
}

// Data whose sub-blocks differ in spread and offset, so per-sub-block scales and mins matter.
std::vector<float> varied_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = dist(rng) * static_cast<float>(1 + (i / 16) % 5) + 0.5f * static_cast<float>((i / 32) % 3) - 0.5f;
  }
  return v;
}

float max_abs(const float* x, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// K-quants with mins: the grid's min and step round up to the scale units (S steps of d, with
// fp16 headroom h), so max error <= half a step <= M (2 + h / S) / N * (1 + h / S) / 2 for N
// code steps; symmetric ones (Q3_K, Q6_K): M / N * (1 + h / S) / 2.
double with_mins_bound(double m, double n, double s) { return m * (2 + 1.0015 / s) / n * (1 + 1.0015 / s) / 2; }
double symmetric_bound(double m, double n, double s) { return m / n * (1 + 1.0015 / s) / 2; }

TEST(QuantTypes, EncodersRoundTripWithinTheirBounds) {
  const int64_t cols = 768;
  const auto x = varied_floats(cols, 5);
  for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K,
                        GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    std::vector<uint8_t> bytes(row_bytes(type, cols));
    quantize_row(type, x.data(), cols, bytes.data());
    std::vector<float> back(cols);
    dequantize_row({type, 1, cols, bytes.data()}, 0, back.data());
    const size_t block = block_size(type);
    double worst_ratio = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const float* b = x.data() + static_cast<size_t>(i) / block * block;
      const double m = max_abs(b, block);
      float lo = b[0], hi = b[0];
      for (size_t k = 0; k < block; ++k) lo = std::min(lo, b[k]), hi = std::max(hi, b[k]);
      const double range = hi - lo;
      double bound = 0;
      switch (type) {
        case GgmlType::Q4_1: bound = range / 30 + m * 0x1p-8; break;
        case GgmlType::Q5_1: bound = range / 62 + m * 0x1p-8; break;
        case GgmlType::Q5_0: bound = m / 16 + m * 0x1p-9; break;  // one step: the far side clips at 15
        // Half the widest gap between levels (24 / 2) is below the 14 units between 113 and 127.
        case GgmlType::IQ4_NL: bound = m * 14 / 127 + m * 0x1p-9; break;
        case GgmlType::Q2_K: bound = with_mins_bound(m, 3, 15); break;
        case GgmlType::Q4_K: bound = with_mins_bound(m, 15, 63); break;
        case GgmlType::Q5_K: bound = with_mins_bound(m, 31, 63); break;
        case GgmlType::Q3_K: bound = symmetric_bound(m, 3, 31); break;
        case GgmlType::Q6_K: bound = symmetric_bound(m, 31, 127); break;
        // IQ4_NL's 14 / 127 over a sub-block scale that is off by at most one 6-bit unit
        // (M / 127 / 32), which can push values 127 units past the table.
        case GgmlType::IQ4_XS: bound = m * (14 + 141.0 / 32) / 127 * 1.001; break;
        default: FAIL();
      }
      const double err = std::fabs(back[i] - x[i]);
      ASSERT_LE(err, bound) << type_name(type) << " at " << i << " value " << x[i];
      worst_ratio = std::max(worst_ratio, err / bound);
    }
    // Not vacuous: some value comes within a factor 4 of its bound.
    EXPECT_GT(worst_ratio, 0.25) << type_name(type);
  }
}

TEST(QuantTypes, AllZeroRowsEncodeToZero) {
  const std::vector<float> zeros(256, 0.0f);
  for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K,
                        GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    std::vector<uint8_t> bytes(row_bytes(type, 256));
    quantize_row(type, zeros.data(), 256, bytes.data());
    std::vector<float> back(256, 1.0f);
    dequantize_row({type, 1, 256, bytes.data()}, 0, back.data());
    for (float v : back) ASSERT_EQ(v, 0.0f) << type_name(type);
  }
}

TEST(QuantTypes, NonFiniteScalesAreFound) {
  std::vector<float> x(512, 0.5f);
  for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::IQ4_XS}) {
    std::vector<uint8_t> bytes(row_bytes(type, 256) * 2);
    quantize_row(type, x.data(), 256, bytes.data());
    quantize_row(type, x.data() + 256, 256, bytes.data() + bytes.size() / 2);
    const WeightMatrix w{type, 2, 256, bytes.data()};
    EXPECT_NO_THROW(check_scales_finite(w)) << type_name(type);
    // The last fp16 scale field of row 1's last block, from the layouts: Q4_1 d at 0 and m at 2,
    // Q2_K dmin at 82, Q3_K d at 108, Q5_K dmin at 2, IQ4_XS d at 0.
    size_t field = 0;
    switch (type) {
      case GgmlType::Q4_1: field = 2; break;
      case GgmlType::Q2_K: field = 82; break;
      case GgmlType::Q3_K: field = 108; break;
      case GgmlType::Q5_K: field = 2; break;
      default: break;
    }
    const size_t blocks = 256 / block_size(type);
    put_half(bytes, bytes.size() - block_bytes(type) + field, std::numeric_limits<float>::quiet_NaN());
    try {
      check_scales_finite(w);
      ADD_FAILURE() << type_name(type) << ": NaN scale not found";
    } catch (const Error& e) {
      const std::string want =
          std::string(type_name(type)) + " row 1 block " + std::to_string(blocks - 1) + ": scale is NaN";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(QuantTypes, NonFiniteInputIsAnError) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(256, 1.0f);
    x[77] = bad;
    for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K,
                          GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
      std::vector<uint8_t> bytes(row_bytes(type, 256));
      try {
        quantize_row(type, x.data(), 256, bytes.data());
        ADD_FAILURE() << type_name(type) << " accepted " << bad;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(type_name(type)), std::string::npos) << e.what();
      }
    }
    // Q8_0 also quantizes activations inside matvec: it must not throw, and a NaN becomes a
    // code (not a UB float-to-int conversion) without disturbing the other blocks.
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0}) {
      std::vector<uint8_t> bytes(row_bytes(type, 256));
      EXPECT_NO_THROW(quantize_row(type, x.data(), 256, bytes.data())) << type_name(type);
      std::vector<float> back(256);
      dequantize_row({type, 1, 256, bytes.data()}, 0, back.data());
      EXPECT_NEAR(back[0], 1.0f, 1e-3f) << type_name(type);  // within the fp16 rounding of d
      EXPECT_NEAR(back[255], 1.0f, 1e-3f) << type_name(type);
    }
  }
}

}  // namespace
}  // namespace turbokv::engine
