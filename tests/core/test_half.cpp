#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "turbokv/half.hpp"

using namespace turbokv;

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    EXPECT_EQ(float_to_half(f), h) << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 0x1.0p-11f)), 1.0f);          // tie -> even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3 * 0x1.0p-11f)), 1.0f + 0x1.0p-9f);
  EXPECT_EQ(half_to_float(float_to_half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(65520.0f))));
  EXPECT_EQ(half_to_float(float_to_half(0x1.0p-25f)), 0.0f);                  // tie below min
  EXPECT_EQ(half_to_float(float_to_half(0x1.8p-24f)), 0x1.0p-23f);
  // Brute-force check against the nearest representable value on a sweep.
  for (float x = -70000.0f; x < 70000.0f; x += 0.37f) {
    const float r = half_to_float(float_to_half(x));
    if (std::isinf(r)) continue;
    const uint16_t h = float_to_half(x);
    const float up = half_to_float(static_cast<uint16_t>(h + 1));
    const float down = half_to_float(static_cast<uint16_t>(h - 1));
    EXPECT_LE(std::fabs(r - x), std::fabs(up - x));
    EXPECT_LE(std::fabs(r - x), std::fabs(down - x));
  }
}

TEST(Half, Bfloat16) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-3.5f)), -3.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_NEAR(bf16_to_float(float_to_bf16(3.14159f)), 3.14159f, 0.02f);
}
