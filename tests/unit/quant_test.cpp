// Round-to-nearest quantization (runtime/quant.h): the codes are the nearest of the format's
// grid, the scales follow the definitions, shards cut on group boundaries, bad input is an Error.
#include "runtime/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "runtime/tensor.h"

namespace nanovllm {
namespace {

std::vector<uint16_t> random_bf16(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<uint16_t> w(size_t(n * k));
  for (auto& v : w) v = f32_to_bf16(d(rng));
  return w;
}

TEST(Quant, ParsesTheSchemesAndRefusesOthers) {
  EXPECT_FALSE(parse_quantization("").enabled());
  EXPECT_FALSE(parse_quantization("none").enabled());
  EXPECT_EQ(parse_quantization("int8").format, QuantFormat::Int8);
  EXPECT_EQ(parse_quantization("int4").group, kDefaultInt4Group);
  EXPECT_EQ(parse_quantization("int4-g128").group, 128);
  EXPECT_EQ(quantization_name(parse_quantization("int4-g32")), "int4-g32");
  for (const char* bad : {"int3", "INT8", "int4-g48", "fp8", "int4-g"}) {
    try {
      parse_quantization(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
    }
  }
}

// int8: scale = max|w| / 127 per row and every code the nearest: |w - q s| <= s / 2.
TEST(Quant, Int8IsPerRowNearest) {
  const int64_t n = 13, k = 300;
  std::vector<uint16_t> w = random_bf16(n, k, 1);
  QuantizedWeight q = quantize_rtn(w.data(), n, k, {QuantFormat::Int8, 0}, "w");
  ASSERT_EQ(q.scale.size(), size_t(n));
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(bf16_to_f32(w[size_t(j * k + i)])));
    EXPECT_FLOAT_EQ(q.scale[size_t(j)], amax / 127.0f);
    for (int64_t i = 0; i < k; ++i) {
      const float v = bf16_to_f32(w[size_t(j * k + i)]);
      ASSERT_LE(std::abs(int(q.q[size_t(j * k + i)])), 127);
      ASSERT_LE(std::fabs(v - q.dequantize(j, i)), q.scale[size_t(j)] * 0.5001f) << j << ", " << i;
    }
  }
}

// Codes are w / scale rounded to nearest, ties to even, as std::nearbyint rounds: the same codes
// whatever rounding quantize_rtn runs inside (a row whose scale is 1 puts w on the ties).
TEST(Quant, RoundsHalfToEvenAsNearbyint) {
  const std::vector<float> row = {127.0f, 0.5f,  1.5f,   2.5f,   -0.5f,
                                  -1.5f,  -2.5f, 126.5f, -3.25f, 0.0f};
  std::vector<uint16_t> bits;
  for (float v : row) bits.push_back(f32_to_bf16(v));
  QuantizedWeight q =
      quantize_rtn(bits.data(), 1, int64_t(row.size()), {QuantFormat::Int8, 0}, "w");
  ASSERT_EQ(q.scale[0], 1.0f);
  const std::vector<int> want = {127, 0, 2, 2, 0, -2, -2, 126, -3, 0};
  for (size_t i = 0; i < row.size(); ++i) EXPECT_EQ(int(q.q[i]), want[i]) << row[i];
  // Random rows: every code is nearbyint's of w * (1 / scale).
  const int64_t n = 7, k = 513;
  std::vector<uint16_t> w = random_bf16(n, k, 3);
  for (QuantScheme scheme :
       {QuantScheme{QuantFormat::Int8, 0}, QuantScheme{QuantFormat::Int8, 64}}) {
    QuantizedWeight r = quantize_rtn(w.data(), n, k, scheme, "w");
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < k; ++i) {
        const float s = r.scale[size_t(j * r.groups() + i / r.group_size())];
        const float code = std::nearbyint(bf16_to_f32(w[size_t(j * k + i)]) * (1.0f / s));
        ASSERT_EQ(int(r.q[size_t(j * k + i)]), int(std::clamp(code, -127.0f, 127.0f)))
            << j << ", " << i;
      }
    }
  }
}

// int8 in groups: a scale per (row, group) = the group's max|w| / 127.
TEST(Quant, Int8GroupsHaveTheirOwnScale) {
  const int64_t n = 3, k = 100, group = 32;
  std::vector<uint16_t> w = random_bf16(n, k, 9);
  QuantizedWeight q = quantize_rtn(w.data(), n, k, {QuantFormat::Int8, group}, "w");
  ASSERT_EQ(q.groups(), 4);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < 4; ++g) {
      float amax = 0;
      for (int64_t i = g * group; i < std::min(k, (g + 1) * group); ++i) {
        amax = std::max(amax, std::fabs(bf16_to_f32(w[size_t(j * k + i)])));
      }
      const float s = q.scale[size_t(j * 4 + g)];
      EXPECT_FLOAT_EQ(s, amax / 127.0f);
      for (int64_t i = g * group; i < std::min(k, (g + 1) * group); ++i) {
        ASSERT_LE(std::fabs(bf16_to_f32(w[size_t(j * k + i)]) - q.dequantize(j, i)), s * 0.5001f);
      }
    }
  }
}

// int4: per group, scale (max - min) / 15 and zero -min / scale as f16 values, codes in [0, 15]
// and the nearest of the grid.
TEST(Quant, Int4GroupsAreAsymmetricNearest) {
  for (int64_t group : {32, 64, 128}) {
    const int64_t n = 5, k = 200;  // the last group is short
    std::vector<uint16_t> w = random_bf16(n, k, uint32_t(group));
    QuantizedWeight q = quantize_rtn(w.data(), n, k, {QuantFormat::Int4, group}, "w");
    ASSERT_EQ(q.groups(), (k + group - 1) / group);
    validate(q, "w");
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t g = 0; g < q.groups(); ++g) {
        const float s = q.scale[size_t(j * q.groups() + g)], z = q.zero[size_t(j * q.groups() + g)];
        EXPECT_EQ(s, f16_to_f32(f32_to_f16(s)));
        EXPECT_EQ(z, f16_to_f32(f32_to_f16(z)));
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t i = g * group; i < std::min(k, (g + 1) * group); ++i) {
          lo = std::min(lo, bf16_to_f32(w[size_t(j * k + i)]));
          hi = std::max(hi, bf16_to_f32(w[size_t(j * k + i)]));
        }
        EXPECT_NEAR(s, (hi - lo) / 15.0f, (hi - lo) / 15.0f * 1e-3f);
        EXPECT_NEAR(-z * s, lo, s * 0.01f);  // the grid starts at the minimum
        for (int64_t i = g * group; i < std::min(k, (g + 1) * group); ++i) {
          const int code = q.q[size_t(j * k + i)];
          ASSERT_TRUE(code >= 0 && code <= 15) << code;
          const float v = bf16_to_f32(w[size_t(j * k + i)]);
          ASSERT_LE(std::fabs(v - q.dequantize(j, i)), s * 0.51f) << "group " << group << " [" << j << ", " << i << "]";
        }
      }
    }
  }
}

// A group far from zero relative to its spread keeps |zero| <= 2048 and rounds within
// max|w| / 4096.
TEST(Quant, Int4GroupFarFromZeroStaysBounded) {
  std::vector<uint16_t> w(32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(100.0f + 0.0625f * float(i % 2));
  QuantizedWeight q = quantize_rtn(w.data(), 1, 32, {QuantFormat::Int4, 32}, "w");
  validate(q, "w");
  EXPECT_LE(std::fabs(q.zero[0]), 2048.0f);
  for (int64_t i = 0; i < 32; ++i) {
    EXPECT_LE(std::fabs(q.dequantize(0, i) - bf16_to_f32(w[size_t(i)])), 100.1f / 4096 + 1e-3f);
  }
}

TEST(Quant, ValidateNamesWhatIsWrong) {
  std::vector<uint16_t> w = random_bf16(2, 32, 4);
  QuantizedWeight q = quantize_rtn(w.data(), 2, 32, {QuantFormat::Int4, 32}, "w");
  auto expect_error = [](const QuantizedWeight& bad, const std::string& needle) {
    try {
      validate(bad, "model.layers.3.mlp.up_proj");
      ADD_FAILURE() << "accepted; wanted an error with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.layers.3.mlp.up_proj"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  QuantizedWeight bad = q;
  bad.q[5] = 16;
  expect_error(bad, "outside [0, 15]");
  bad = q;
  bad.scale[1] = 0.1f;  // not an f16 value
  expect_error(bad, "f16");
  bad = q;
  bad.zero.pop_back();
  expect_error(bad, "zeros");
  bad = q;
  bad.scheme.group = 12;
  expect_error(bad, "group");
  bad = q;
  bad.scale[0] = NAN;
  expect_error(bad, "finite");
}

TEST(Quant, ConstantRowsAndZerosAreExact) {
  std::vector<uint16_t> w(64, f32_to_bf16(0.25f));
  std::vector<uint16_t> z(64, 0);
  for (QuantScheme s : {QuantScheme{QuantFormat::Int8, 0}, QuantScheme{QuantFormat::Int4, 32}}) {
    QuantizedWeight q = quantize_rtn(w.data(), 2, 32, s, "w");
    QuantizedWeight qz = quantize_rtn(z.data(), 2, 32, s, "z");
    for (int64_t i = 0; i < 32; ++i) {
      EXPECT_EQ(q.dequantize(1, i), 0.25f) << quantization_name(s);
      EXPECT_EQ(qz.dequantize(0, i), 0.0f) << quantization_name(s);
    }
  }
}

TEST(Quant, NonFiniteWeightIsAnErrorNamingTheTensor) {
  std::vector<uint16_t> w = random_bf16(4, 8, 2);
  w[13] = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  for (QuantScheme s : {QuantScheme{QuantFormat::Int8, 0}, QuantScheme{QuantFormat::Int4, 32}}) {
    try {
      quantize_rtn(w.data(), 4, 8, s, "model.layers.0.mlp.up_proj.weight");
      ADD_FAILURE() << "NaN accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mlp.up_proj.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[1, 5]"), std::string::npos) << e.what();
    }
  }
}

// A weight large enough to quantize on several threads names its first bad value, and gives
// the codes one thread gives.
TEST(Quant, LargeWeightsMatchRowByRowAndNameTheFirstBadValue) {
  const int64_t n = 1024, k = 1024;
  std::vector<uint16_t> w = random_bf16(n, k, 5);
  for (QuantScheme s : {QuantScheme{QuantFormat::Int8, 0}, QuantScheme{QuantFormat::Int4, 64}}) {
    QuantizedWeight whole = quantize_rtn(w.data(), n, k, s, "w");
    for (int64_t j : {int64_t(0), int64_t(511), int64_t(1023)}) {
      QuantizedWeight one = quantize_rtn(w.data() + j * k, 1, k, s, "w");
      ASSERT_TRUE(std::equal(one.q.begin(), one.q.end(), whole.q.begin() + j * k)) << j;
      ASSERT_TRUE(std::equal(one.scale.begin(), one.scale.end(), whole.scale.begin() + j * one.groups()));
    }
  }
  w[size_t(700 * k + 3)] = f32_to_bf16(std::numeric_limits<float>::infinity());
  w[size_t(100 * k + 5)] = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  try {
    quantize_rtn(w.data(), n, k, {QuantFormat::Int4, 64}, "big.weight");
    ADD_FAILURE() << "non-finite values accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("big.weight: value nan at [100, 5]"), std::string::npos) << e.what();
  }
}

// A column shard equals the same columns of the whole weight's quantization.
TEST(Quant, ColumnShardsCutTheWholeQuantization) {
  const int64_t n = 6, k = 256;
  std::vector<uint16_t> w = random_bf16(n, k, 3);
  for (QuantScheme s : {QuantScheme{QuantFormat::Int8, 0}, QuantScheme{QuantFormat::Int8, 64},
                        QuantScheme{QuantFormat::Int4, 64}}) {
    QuantizedWeight whole = quantize_rtn(w.data(), n, k, s, "w");
    QuantizedWeight part = slice_cols(whole, 128, 256, "w");
    ASSERT_EQ(part.k, 128);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < 128; ++i) ASSERT_EQ(part.dequantize(j, i), whole.dequantize(j, 128 + i));
    }
  }
  QuantizedWeight q4 = quantize_rtn(w.data(), n, k, {QuantFormat::Int4, 64}, "w");
  try {
    slice_cols(q4, 96, 192, "model.layers.0.mlp.down_proj.weight");
    ADD_FAILURE() << "a shard splitting a group was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[96, 192)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("group 64"), std::string::npos) << e.what();
  }
  // Row shards and stacking give back the whole.
  QuantizedWeight top = slice_rows(q4, 0, 2), rest = slice_rows(q4, 2, n);
  QuantizedWeight again = stack_rows({top, rest});
  EXPECT_EQ(again.q, q4.q);
  EXPECT_EQ(again.scale, q4.scale);
  EXPECT_EQ(again.zero, q4.zero);
  EXPECT_EQ(again.n, n);
}

}  // namespace
}  // namespace nanovllm
