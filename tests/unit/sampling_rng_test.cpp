// The per-element functions of the sampling rule (runtime/sampling_rng.h, shared with CUDA) at
// their numerical edges, and the SamplingBatch tables the engine builds.
#include "runtime/sampling_rng.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "runtime/sampling_batch.h"

namespace nanovllm {
namespace {

TEST(SamplingRng, ScaledLogitNeverOverflowsOrNaNs) {
  const float temps[] = {FLT_TRUE_MIN, 1e-40f, FLT_MIN, 1e-20f, 0.01f, 1.0f, 1e30f, FLT_MAX};
  const float ys[] = {-FLT_MAX, -1e30f, -3.0f, -0.0f, 0.0f, 2.5f, FLT_MAX, -INFINITY};
  for (float t : temps) {
    for (float m : {2.5f, FLT_MAX, 0.0f}) {
      for (float y : ys) {
        if (y > m) continue;
        const float d = scaled_logit(y, m, t);
        EXPECT_FALSE(std::isnan(d)) << y << " " << m << " " << t;
        EXPECT_LE(d, 0.0f);
        if (y == m) {
          EXPECT_EQ(d, 0.0f);
        }
      }
    }
  }
  // The maximum stays 0; at T = 1e-40 a gap of 0.1 overflows to -inf, a gap of 1e-3 gives -1e37:
  // either way far below the race's reach (|score - d| < 17).
  EXPECT_EQ(scaled_logit(1.0f, 1.0f, 1e-40f), 0.0f);
  EXPECT_EQ(scaled_logit(0.9f, 1.0f, 1e-40f), -INFINITY);
  EXPECT_LT(scaled_logit(0.999f, 1.0f, 1e-40f), -1e36f);
  EXPECT_EQ(scaled_logit(0.999f, 1.0f, FLT_TRUE_MIN), -INFINITY);
  // +inf maximum: the +inf tokens are 0, the others -inf.
  EXPECT_EQ(scaled_logit(INFINITY, INFINITY, 0.5f), 0.0f);
  EXPECT_EQ(scaled_logit(1e30f, INFINITY, 0.5f), -INFINITY);
}

TEST(SamplingRng, RaceScoreIsFiniteForEveryUniform) {
  for (int64_t i = 0; i < 100000; ++i) {
    const float u = sample_uniform(7, 3, i);
    ASSERT_GT(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    const float s = race_score(0.0f, u);
    ASSERT_TRUE(std::isfinite(s));
    ASSERT_GT(s, -2.9f);   // the bound the CPU's pruning relies on
    ASSERT_LT(s, 16.7f);
  }
  // The extreme uniforms themselves.
  const float lo = 0.5f / 8388608.0f, hi = (8388607.0f + 0.5f) / 8388608.0f;
  EXPECT_GT(race_score(0.0f, lo), -2.9f);
  EXPECT_LT(race_score(0.0f, hi), 16.7f);
  EXPECT_EQ(race_score(-INFINITY, 0.5f), -INFINITY);
}

TEST(SamplingRng, AdjustLogit) {
  EXPECT_EQ(clean_logit(NAN), -INFINITY);
  EXPECT_EQ(clean_logit(3.0f), 3.0f);
  EXPECT_EQ(adjust_logit(NAN, false, 5.0f, false, 0, 1, 0, 0), -INFINITY);
  EXPECT_EQ(adjust_logit(3.0f, true, 5.0f, false, 0, 1, 0, 0), -INFINITY);
  EXPECT_EQ(adjust_logit(3.0f, false, 5.0f, false, 0, 1, 0, 0), 8.0f);
  EXPECT_EQ(adjust_logit(3.0f, false, 0.0f, true, 0, 2.0f, 0, 0), 1.5f);     // positive: divided
  EXPECT_EQ(adjust_logit(-3.0f, false, 0.0f, true, 0, 2.0f, 0, 0), -6.0f);   // negative: multiplied
  EXPECT_EQ(adjust_logit(1.0f, false, 0.0f, false, 3, 1.0f, 0.5f, 0.25f), 1.0f - 1.5f - 0.25f);
  EXPECT_EQ(adjust_logit(1.0f, false, 0.0f, false, 0, 1.0f, 0.5f, 0.25f), 1.0f) << "not in the output";
  EXPECT_EQ(adjust_logit(INFINITY, false, -100.0f, true, 4, 3.0f, 2.0f, 2.0f), INFINITY);
  EXPECT_EQ(adjust_logit(-INFINITY, false, 100.0f, true, 4, 0.5f, -2.0f, -2.0f), -INFINITY);
  EXPECT_FALSE(std::isnan(adjust_logit(FLT_MAX, false, 100.0f, true, 1000000, 0.01f, -2.0f, -2.0f)));
}

TEST(SamplingRng, MinPAndSampleSeeds) {
  EXPECT_TRUE(min_p_keeps(0.0f, 1.0f)) << "the maximum always survives";
  EXPECT_TRUE(min_p_keeps(std::log(0.5f) + 1e-6f, 0.5f));
  EXPECT_FALSE(min_p_keeps(std::log(0.5f) - 1e-3f, 0.5f));
  EXPECT_FALSE(min_p_keeps(-INFINITY, 1e-30f));
  EXPECT_EQ(sample_seed(42, 0), 42u);
  EXPECT_NE(sample_seed(42, 1), sample_seed(42, 2));
  EXPECT_NE(sample_seed(42, 1), sample_seed(43, 1));
}

TEST(SamplingBatchBuild, MergesAndSkipsNeutralRows) {
  SamplingBatch b;
  std::vector<SamplingRow> rows(2);
  build_sampling_batch(b, rows);
  EXPECT_TRUE(b.empty()) << "all neutral: the fast path";
  EXPECT_EQ(b.min_p_of(0), 0.0f);
  EXPECT_EQ(b.repetition_of(5), 1.0f);
  EXPECT_EQ(b.adjusts_begin(0), b.adjusts_end(0));

  const std::vector<int32_t> prompt = {5, 3, 5}, output = {3, 9, 3};
  const std::vector<std::pair<int32_t, float>> bias = {{9, -2.0f}, {11, 4.0f}};
  const std::vector<int32_t> masked = {3, 12};
  rows[1].repetition_penalty = 1.2f;
  rows[1].frequency_penalty = 0.5f;
  rows[1].prompt = prompt;
  rows[1].output = output;
  rows[1].logit_bias = bias;
  rows[1].masked = masked;
  rows[1].num_logprobs = 3;
  build_sampling_batch(b, rows);
  ASSERT_EQ(b.adjust_offsets, (std::vector<int32_t>{0, 0, 5}));
  EXPECT_EQ(b.num_logprobs, (std::vector<int32_t>{-1, 3}));
  EXPECT_TRUE(b.any_logprobs());
  std::vector<int32_t> ids;
  for (const TokenAdjust* a = b.adjusts_begin(1); a != b.adjusts_end(1); ++a) ids.push_back(a->token_id);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 5, 9, 11, 12}));
  const TokenAdjust* a = b.adjusts_begin(1);
  EXPECT_EQ(a[0].output_count, 2);  // token 3: twice in the output, in context, masked
  EXPECT_EQ(a[0].in_context, 1);
  EXPECT_EQ(a[0].masked, 1);
  EXPECT_EQ(a[1].output_count, 0);  // token 5: prompt only
  EXPECT_EQ(a[1].in_context, 1);
  EXPECT_EQ(a[2].output_count, 1);  // token 9: output and bias
  EXPECT_EQ(a[2].bias, -2.0f);
  EXPECT_EQ(a[3].in_context, 0);    // token 11: bias only
  EXPECT_EQ(a[3].bias, 4.0f);
  EXPECT_EQ(a[4].masked, 1);        // token 12: masked only
  EXPECT_EQ(b.repetition_of(1), 1.2f);
  EXPECT_EQ(b.repetition_of(7), 1.0f) << "a padded lane is neutral";
}

}  // namespace
}  // namespace nanovllm
