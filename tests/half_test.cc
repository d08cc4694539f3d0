// f16 / bf16 <-> f32 conversions: exhaustive round trips and hand-picked rounding cases.
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/half.h"
#include "gtest/gtest.h"

namespace fflite {
namespace {

TEST(HalfTest, EveryF16RoundTripsThroughF32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f)))) << h;
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << "f16 bits " << h << " -> " << f;
  }
}

TEST(HalfTest, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);                 // largest finite
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));    // smallest subnormal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));    // smallest normal
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);  // below the halfway point to 65536: stays finite
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // halfway: ties to even -> inf
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: to even 0
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);  // above half: rounds up
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3·2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up.
  EXPECT_EQ(F32ToF16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::quiet_NaN()) & 0x7c00, 0x7c00);
}

TEST(HalfTest, Bf16KnownValues) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);         // tie -> even
  EXPECT_EQ(F32ToBf16(1.0f + 3.0f * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -7)), 0x3f81);         // exact
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(F32ToBf16(f), h);
    }
  }
}

}  // namespace
}  // namespace fflite
