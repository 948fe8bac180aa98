#include "common/dtype.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tessera {
namespace {

// Reference: round a float to f16 through double arithmetic (nearest, ties to even).
uint16_t RefF32ToF16(float f) {
  if (std::isnan(f)) return 0x7e00;
  // brute force: pick the closest representable f16, ties to even mantissa
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  uint16_t best = 0;
  double bestd = INFINITY;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    double v = F16ToF32(static_cast<uint16_t>(h));
    double d = std::fabs(v - a);
    if (d < bestd || (d == bestd && (h & 1) == 0)) {
      bestd = d;
      best = static_cast<uint16_t>(h);
    }
  }
  // beyond max finite + half ulp rounds to inf
  if (a >= 65520.0) return sign | 0x7c00;
  return sign | best;
}

TEST(DType, F16RoundTripAllValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << "h=" << h;
  }
}

TEST(DType, F16RoundingMatchesBruteForce) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> mag(-30, 17);
  for (int i = 0; i < 300; ++i) {
    float f = std::ldexp(1.0f + (rng() % 100000) / 100000.0f, static_cast<int>(mag(rng)));
    if (i % 2) f = -f;
    EXPECT_EQ(F32ToF16(f), RefF32ToF16(f)) << "f=" << f;
  }
  // exact ties: 1 + 2^-11 lies halfway between 1 and 1+2^-10: rounds to even (1.0)
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(BitsF32(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(F32ToBf16(BitsF32(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(F32ToBf16(BitsF32(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(F32ToBf16(f), h);
    }
  }
}

TEST(DType, Names) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBfloat16);
  EXPECT_STREQ(DTypeName(DType::kFloat16), "float16");
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_FALSE(ParseDType("float128").has_value());
  EXPECT_EQ(*ParseRedOp("avg"), RedOp::kAvg);
}

}  // namespace
}  // namespace tessera
