// The CUDA kernels' per-element math (backend/cuda/device_math.h) and launch geometry
// (backend/cuda/launch.h), checked on the CPU: the same inline functions the GPU runs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/device_math.h"
#include "backend/cuda/launch.h"
#include "runtime/tensor.h"

namespace nanovllm::cuda {
namespace {

// Every f16 bit pattern (the int4 weights' scales and zeros) to the host's f32, bit for bit.
TEST(CudaMath, F16MatchesTheHostConversion) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float got = f16_bits_to_f32(h), want = f16_to_f32(uint16_t(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(f32_bits(got), f32_bits(want)) << "f16 bits " << h;
    }
  }
}

TEST(CudaMath, Bf16MatchesTheHostConversion) {
  std::mt19937 rng(3);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.5f,
                               1e-40f,
                               3.3895e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  // Exact ties between two bf16 values (round to even) and random bit patterns.
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0xc2f7u}) values.push_back(bits_f32((hi << 16) | 0x8000u));
  for (int i = 0; i < 100000; ++i) values.push_back(bits_f32(uint32_t(rng())));
  for (float f : values) {
    const uint16_t got = f32_to_bf16_bits(f);
    ASSERT_EQ(got, f32_to_bf16(f)) << "f32 bits " << std::hex << f32_bits(f);
    if (f == f) {
      ASSERT_EQ(f32_bits(bf16_bits_to_f32(got)), f32_bits(bf16_to_f32(got)));
    } else {
      ASSERT_TRUE(std::isnan(bf16_bits_to_f32(got)));
    }
  }
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x3f808000u)), 0x3f80);  // tie: even stays
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x3f818000u)), 0x3f82);  // tie: odd rounds up
}

TEST(CudaMath, RopeRotateIsRotateHalf) {
  const float a = 0.7f, x1 = 1.25f, x2 = -0.5f;
  const RotatedPair r = rope_rotate(x1, x2, std::cos(a), std::sin(a));
  EXPECT_FLOAT_EQ(r.x1, x1 * std::cos(a) - x2 * std::sin(a));
  EXPECT_FLOAT_EQ(r.x2, x2 * std::cos(a) + x1 * std::sin(a));
  // A rotation keeps the norm.
  EXPECT_NEAR(r.x1 * r.x1 + r.x2 * r.x2, x1 * x1 + x2 * x2, 1e-6);
}

TEST(CudaMath, SiluMul) {
  for (float g : {-8.0f, -1.0f, 0.0f, 0.5f, 3.0f}) {
    const double want = g / (1.0 + std::exp(-double(g))) * 1.5;
    EXPECT_NEAR(silu_mul(g, 1.5f), want, 1e-6 * (1 + std::fabs(want)));
  }
}

// The online softmax of the kernels (rescale_factor per key) and the LSE merge of partitions
// (merge_weights) give softmax(s) @ v over all keys.
TEST(CudaMath, OnlineSoftmaxAndMergeEqualTheDirectSoftmax) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const int keys = 1 + int(rng() % 700);
    std::vector<float> s(static_cast<size_t>(keys)), v(static_cast<size_t>(keys));
    for (int j = 0; j < keys; ++j) {
      s[size_t(j)] = n(rng);
      v[size_t(j)] = n(rng);
    }
    double mx = -1e300, z = 0, want = 0;
    for (float x : s) mx = std::max(mx, double(x));
    for (int j = 0; j < keys; ++j) {
      z += std::exp(s[size_t(j)] - mx);
      want += std::exp(s[size_t(j)] - mx) * v[size_t(j)];
    }
    want /= z;
    // Partitions of 256 keys, each by the online rule, merged pairwise left to right.
    SoftmaxState total{-INFINITY, 0.0f};
    float total_o = 0.0f;  // normalized output so far
    for (int p0 = 0; p0 < keys; p0 += kDecodePartitionKeys) {
      float m = -INFINITY, l = 0.0f, acc = 0.0f;
      for (int j = p0; j < std::min(keys, p0 + kDecodePartitionKeys); ++j) {
        const float m_new = std::max(m, s[size_t(j)]);
        const float c = rescale_factor(m, m_new);
        const float p = std::exp(s[size_t(j)] - m_new);
        l = l * c + p;
        acc = acc * c + p * v[size_t(j)];
        m = m_new;
      }
      const MergeWeights w = merge_weights(total, {m, l});
      total_o = (w.wa * total.l * total_o + w.wb * acc) / w.l;
      total = {std::max(total.m, m), w.l};
    }
    EXPECT_NEAR(total_o, want, 1e-4 * (1 + std::fabs(want))) << keys << " keys";
  }
  // Empty states merge to nothing.
  const MergeWeights e = merge_weights({-INFINITY, 0.0f}, {-INFINITY, 0.0f});
  EXPECT_EQ(e.l, 0.0f);
  EXPECT_EQ(rescale_factor(-INFINITY, 1.0f), 0.0f);
}

TEST(CudaMath, SlotArithmeticIs64Bit) {
  // 2^21 blocks of 256 tokens x 8 heads x 128 dims: far past 2^31 elements.
  const int32_t slot = (1 << 29) + 7;
  EXPECT_EQ(slot_offset(slot, 8 * 128), int64_t(slot) * 1024);
  const int32_t table[] = {5, -1, 9, 2};
  EXPECT_EQ(key_slot(table, 0, 16), 5 * 16);
  EXPECT_EQ(key_slot(table, 37, 16), 9 * 16 + 5);
  EXPECT_EQ(key_slot(table, 63, 16), 2 * 16 + 15);
  const int32_t big[] = {(1 << 24) + 3};
  EXPECT_EQ(key_slot(big, 255, 256), int64_t((1 << 24) + 3) * 256 + 255);
  EXPECT_EQ(query_position(10, 4, 0), 6);
  EXPECT_EQ(query_position(10, 4, 3), 9);
  // Row r of a [T, heads, D] view with strides (s0, s1).
  EXPECT_EQ(row_offset(7, 3, 100, 8), 2 * 100 + 1 * 8);
  EXPECT_EQ(row_offset(7, 1, 100, 0), 700);
}

TEST(CudaLaunch, DecodePartitionsDependOnTheSequenceOnly) {
  EXPECT_EQ(decode_num_partitions(0), 1);
  EXPECT_EQ(decode_num_partitions(1), 1);
  EXPECT_EQ(decode_num_partitions(kDecodePartitionKeys), 1);
  EXPECT_EQ(decode_num_partitions(kDecodePartitionKeys + 1), 2);
  EXPECT_EQ(decode_num_partitions(40960),
            (40960 + kDecodePartitionKeys - 1) / kDecodePartitionKeys);
  // The grid covers the widest row; each sequence uses its own count, at most the grid's.
  for (int64_t ctx : {1, 255, 256, 257, 1000, 4097})
    for (int64_t width_keys : {4352, 8448})
      EXPECT_LE(decode_seq_partitions(ctx), decode_num_partitions(width_keys));
}

TEST(CudaLaunch, DecodeGridCoversTheMachineWithinTheTable) {
  EXPECT_EQ(decode_grid_partitions(1, 8, 132, 17), 17);   // batch 1: every partition its CTA
  EXPECT_EQ(decode_grid_partitions(256, 8, 132, 17), 16);  // the cap: 256 x 132 CTAs / 2048
  EXPECT_EQ(decode_grid_partitions(4, 8, 132, 17), 17);
  EXPECT_EQ(decode_grid_partitions(16, 8, 132, 17), 17);
  EXPECT_EQ(decode_grid_partitions(512, 8, 132, 160), 8);  // a long table: capped
  EXPECT_EQ(decode_grid_partitions(4096, 8, 132, 17), 1);
  EXPECT_EQ(decode_grid_partitions(3, 2, 132, 1), 1);
  for (int64_t b = 1; b <= 512; ++b) {
    const int g = decode_grid_partitions(b, 8, 132, 17);
    EXPECT_GE(g, 1);
    EXPECT_LE(g, 17);
  }
}

TEST(CudaLaunch, TilesAndBuckets) {
  EXPECT_EQ(decode_group_tile(1), 1);
  EXPECT_EQ(decode_group_tile(2), 2);
  EXPECT_EQ(decode_group_tile(3), 4);
  EXPECT_EQ(decode_group_tile(5), 8);
  EXPECT_EQ(decode_group_tile(9), 0);
  EXPECT_EQ(prefill_tokens_per_cta(2), kPrefillRows / 2);
  EXPECT_EQ(prefill_num_tiles(1, 2), 1);
  EXPECT_EQ(prefill_num_tiles(kPrefillRows / 2 + 1, 2), 2);
  EXPECT_EQ(prefill_num_tiles(100, 3), (100 + 9) / 10);  // 10 tokens x 3 heads per CTA
  EXPECT_EQ(prefill_num_tiles(100, 3, kPrefillMmaRows), (100 + 20) / 21);  // 21 tokens x 3 heads
  EXPECT_EQ(prefill_tokens_per_cta(8, kPrefillMmaRows), 8);
  EXPECT_TRUE(prefill_uses_mma(128));
  EXPECT_TRUE(prefill_uses_mma(16));
  EXPECT_FALSE(prefill_uses_mma(256));
  EXPECT_EQ(gemv_m_tile(1), 1);
  EXPECT_EQ(gemv_m_tile(3), 4);
  EXPECT_EQ(gemv_m_tile(16), 16);
  EXPECT_EQ(gemv_m_tile(17), 0);
  EXPECT_TRUE(gemv_eligible(4, 1024, 1024, 256, 512));
  EXPECT_FALSE(gemv_eligible(4, 1020, 1020, 256, 512));   // K % 8
  EXPECT_FALSE(gemv_eligible(17, 1024, 1024, 256, 512));  // M
  EXPECT_FALSE(gemv_eligible(4, 1024, 1024, 258, 512));   // alignment
  // Graph buckets above 16 are steps of 16: an eager batch and its padded bucket share the
  // cuBLASLt algorithm.
  for (int64_t m = 17; m <= 512; ++m) {
    const int64_t bucket = (m + 15) / 16 * 16;
    EXPECT_EQ(gemm_algo_m(m), gemm_algo_m(bucket)) << m;
  }
  EXPECT_EQ(gemm_algo_m(513), 768);
  EXPECT_TRUE(attention_head_dim_supported(128));
  EXPECT_FALSE(attention_head_dim_supported(80));
}

}  // namespace
}  // namespace nanovllm::cuda
