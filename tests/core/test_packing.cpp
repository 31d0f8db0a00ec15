// Dense bit packing: exact round trip at every width and length, the documented LSB-first
// layout byte for byte, exact sizes, and rejection of bad widths.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "turbokv/error.hpp"
#include "turbokv/packing.hpp"

namespace turbokv {
namespace {

TEST(Packing, PackedSizeIsCeilOfBits) {
  EXPECT_EQ(packed_size(128, 3), 48u);
  EXPECT_EQ(packed_size(128, 1), 16u);
  EXPECT_EQ(packed_size(1, 3), 1u);
  EXPECT_EQ(packed_size(3, 3), 2u);
  EXPECT_EQ(packed_size(0, 5), 0u);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n = 0; n < 40; ++n) EXPECT_EQ(packed_size(n, bits), (n * bits + 7) / 8);
  }
}

TEST(Packing, RoundTripEveryWidthAndLength) {
  std::mt19937 rng(1);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000}) {
      std::vector<uint8_t> codes(n);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
      // Guard bytes after the packed run must stay untouched.
      std::vector<uint8_t> packed(packed_size(n, bits) + 4, 0xA5);
      pack_codes(codes.data(), n, bits, packed.data());
      for (size_t i = packed_size(n, bits); i < packed.size(); ++i) ASSERT_EQ(packed[i], 0xA5);
      std::vector<uint8_t> back(n + 1, 0xEE);
      unpack_codes(packed.data(), n, bits, back.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], codes[i]) << "bits " << bits << " n " << n;
      EXPECT_EQ(back[n], 0xEE);
    }
  }
}

TEST(Packing, LayoutIsLsbFirstBitStream) {
  std::mt19937 rng(2);
  for (int bits = 1; bits <= 8; ++bits) {
    const size_t n = 37;
    std::vector<uint8_t> codes(n);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
    std::vector<uint8_t> expected(packed_size(n, bits), 0);
    for (size_t i = 0; i < n; ++i) {
      for (int b = 0; b < bits; ++b) {
        const size_t k = i * bits + b;  // stream bit
        if ((codes[i] >> b) & 1) expected[k / 8] |= static_cast<uint8_t>(1u << (k % 8));
      }
    }
    std::vector<uint8_t> packed(expected.size(), 0xFF);
    pack_codes(codes.data(), n, bits, packed.data());
    EXPECT_EQ(packed, expected) << "bits " << bits;
  }
  // A worked example from the header: bits = 3, codes 5, 6, 7 -> 0b11'110'101, 0b0000000'1.
  const uint8_t codes[3] = {5, 6, 7};
  uint8_t packed[2];
  pack_codes(codes, 3, 3, packed);
  EXPECT_EQ(packed[0], 0xF5);
  EXPECT_EQ(packed[1], 0x01);
}

TEST(Packing, HighBitsOfInputCodesAreIgnored) {
  const uint8_t codes[8] = {0xFF, 0xFE, 0x81, 0x80, 0x7F, 0x03, 0x04, 0x05};
  uint8_t packed[2];
  pack_codes(codes, 8, 2, packed);
  uint8_t back[8];
  unpack_codes(packed, 8, 2, back);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(back[i], codes[i] & 3);
}

TEST(Packing, RejectsBadWidths) {
  uint8_t buf[4] = {};
  for (int bits : {0, 9, -1, 16}) {
    EXPECT_THROW(packed_size(4, bits), Error);
    EXPECT_THROW(pack_codes(buf, 4, bits, buf), Error);
    EXPECT_THROW(unpack_codes(buf, 4, bits, buf), Error);
  }
}

}  // namespace
}  // namespace turbokv
