// FP8 E4M3 conversion (src/runtime/fp8.h) against a brute-force reference: the nearest of the 127
// non-negative finite codes, ties to the even code, saturating at 448.
#include "runtime/fp8.h"

#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace nanovllm {
namespace {

// Every finite non-negative E4M3 value from its definition: (1 + m/8) 2^(e-7), or m/8 2^-6.
double reference_value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}

uint8_t reference_encode(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(reference_value(c) - a), db = std::fabs(reference_value(best) - a);
    if (d < db || (d == db && (c & 1) == 0 && (best & 1) == 1)) best = c;
  }
  return uint8_t(sign | best);
}

TEST(Fp8, DecodesEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_e4m3_to_float(uint8_t(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    const double expect = (c & 0x80 ? -1 : 1) * reference_value(c & 0x7F);
    EXPECT_EQ(double(v), expect) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << "code " << c;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(uint8_t(c))), c) << "code " << c;
  }
}

TEST(Fp8, MidpointsRoundToEven) {
  for (int c = 0; c < 0x7E; ++c) {  // halfway between code c and c + 1: the even one wins
    const float mid = float((reference_value(c) + reference_value(c + 1)) / 2);
    ASSERT_EQ(double(mid), (reference_value(c) + reference_value(c + 1)) / 2);  // exact in f32
    EXPECT_EQ(float_to_fp8_e4m3(mid), (c & 1) ? c + 1 : c) << "between " << c << " and " << c + 1;
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, 1e9f)), c + 1);
    EXPECT_EQ(float_to_fp8_e4m3(-mid), 0x80 | ((c & 1) ? c + 1 : c));
  }
}

TEST(Fp8, SaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(463.9f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(1e30f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(inf), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-inf), 0xFE);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);        // exactly half of 2^-9: even
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
}

TEST(Fp8, RandomValuesMatchTheReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const float x = (sign(rng) ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(float_to_fp8_e4m3(x), reference_encode(x)) << "x = " << x;
  }
}

}  // namespace
}  // namespace nanovllm
