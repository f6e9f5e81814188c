// Weights quantized at load (Config::quantization int8 / int4) end to end on the CPU backend:
// - logits and greedy ids against the reference forward on the same quantized weights
//   (tests/reference: quantize_rtn's codes dequantized, x rounded where the quantized GEMM
//   rounds it), near-ties allowed as in engine_reference_test;
// - prefix caching, chunked prefill and batching change no greedy output;
// - tensor_parallel_size 2 against 1 (column shards are cut from the whole quantization);
// - bad values and shards that would split an int4 group are Errors naming what was wrong.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/reference_model.h"
#include "reference/reference_tokens.h"

namespace nanovllm {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

struct Case {
  const char* preset;
  const char* quantization;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::string(info.param.preset) + "_" + info.param.quantization;
  for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

class QuantizedEngine : public ::testing::TestWithParam<Case> {
 protected:
  Config config() const {
    Config c = test::tiny_config(test::tiny_model(GetParam().preset));
    c.quantization = GetParam().quantization;
    return c;
  }
  QuantScheme scheme() const { return parse_quantization(GetParam().quantization); }
  // Engine against reference, as a fraction of the largest |logit|. Same weights and rounding
  // points, so only summation orders differ; where x is rounded to int8 codes (int4 weights:
  // steps of max|x_group| / 127), a difference of 1e-4 upstream (the prefill attention's
  // order, from 8 tokens on) moves a few percent of the codes by one step, and the logits by
  // about 1e-2 (measured 0.6e-2 to 1.9e-2 on tiny at 16 to 40 tokens, 1e-7 below 16); with the
  // int16 grid of int8 weights the same moves stay near 1e-4. The weights' quantization itself
  // moves them by 1e-1 (the second figure printed).
  double tolerance() const { return scheme().format == QuantFormat::Int4 ? 3e-2 : 1e-3; }
};

TEST_P(QuantizedEngine, LogitsMatchTheQuantizedReference) {
  const Config c = config();
  ref::ReferenceModel reference(c.model, ref::Precision::kBf16Storage, scheme());
  ref::ReferenceModel unquantized(c.model);
  LLMEngine engine(c);
  for (const auto& prompt : test::random_prompts(4, reference.config().vocab_size, 1, 40, 7)) {
    const std::vector<float> got = test::prefill_logits(engine, prompt);
    const double err = test::relative_error(got, reference.last_logits(prompt));
    const double err_fp32 = test::relative_error(got, unquantized.last_logits(prompt));
    EXPECT_LT(err, tolerance()) << "prompt of " << prompt.size() << " tokens";
    std::printf("%s %s, %zu-token prompt: logit error / max |logit| = %.2e (quantized reference), "
                "%.2e (unquantized fp32 reference)\n",
                GetParam().preset, GetParam().quantization, prompt.size(), err, err_fp32);
  }
}

// As EngineReference.GreedyTokensIdenticalBatched: each prompt matches in full or first differs
// where the reference's top-2 gap is within tolerance() of its largest |logit|; at least 8 of 12
// match.
TEST_P(QuantizedEngine, GreedyMatchesTheQuantizedReference) {
  const Config c = config();
  ref::ReferenceModel reference(c.model, ref::Precision::kBf16Storage, scheme());
  const Prompts prompts = test::random_prompts(12, reference.config().vocab_size, 1, 48, 11);
  const Prompts got = test::greedy_ids(c, prompts, 32);
  test::expect_reference_tokens(got, prompts, reference, 32, tolerance(), 8,
                                (GetParam().preset + std::string(" ") + GetParam().quantization).c_str());
}

// Prefix caching, chunked prefill and one-at-a-time against batched: identical greedy ids (the
// quantized GEMM's rows do not depend on the batch).
TEST_P(QuantizedEngine, EngineFeaturesChangeNoOutput) {
  const Config base = config();
  Prompts prompts = test::random_prompts(6, test::vocab_size(base.model), 20, 60, 3);
  prompts.push_back(prompts[0]);  // a cached prefix
  prompts.back().push_back(5);
  const Prompts want = test::greedy_ids(base, prompts, 16);
  Config no_cache = base;
  no_cache.enable_prefix_caching = false;
  EXPECT_EQ(test::greedy_ids(no_cache, prompts, 16), want) << "prefix caching";
  Config chunked = base;
  chunked.max_num_batched_tokens = 32;
  chunked.max_model_len = 96;
  EXPECT_EQ(test::greedy_ids(chunked, prompts, 16), want) << "chunked prefill";
  for (size_t i = 0; i < prompts.size(); i += 3) {
    EXPECT_EQ(test::greedy_ids(base, {prompts[i]}, 16).front(), want[i]) << "prompt " << i << " alone";
  }
}

// Two ranks against one. Each rank quantizes its own share of x for o_proj and down_proj (a
// shard's max |x| is its own), so logits may differ by the int16 grid's rounding: bounded, and
// greedy ids must agree but for near-ties.
class QuantizedTp : public QuantizedEngine {};

TEST_P(QuantizedTp, TwoRanksMatchOne) {
  Config one = config();
  Config two = one;
  two.tensor_parallel_size = 2;
  const Prompts prompts = test::random_prompts(8, test::vocab_size(one.model), 1, 40, 5);
  {
    LLMEngine e1(one), e2(two);
    const test::LogitGap gap = test::logit_gap(e2, e1, prompts);
    EXPECT_LT(gap.max_diff / gap.range, 1e-3);
    std::printf("%s %s: tp 2 vs tp 1 max logit difference / max |logit| = %.2e\n",
                GetParam().preset, GetParam().quantization, gap.max_diff / gap.range);
  }
  const double agree = test::leading_agreement(test::greedy_ids(two, prompts, 24), test::greedy_ids(one, prompts, 24));
  EXPECT_GE(agree, 0.9);
  std::printf("%s %s: tp 2 greedy tokens equal to tp 1 before the first difference: %.1f%%\n",
              GetParam().preset, GetParam().quantization, 100 * agree);
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantizedEngine,
                         ::testing::Values(Case{"tiny", "int8"}, Case{"tiny", "int4"},
                                           Case{"tiny-qwen2", "int8"}, Case{"tiny-qwen2", "int4-g32"},
                                           Case{"qwen3-moe-tiny", "int8"},
                                           Case{"qwen3-moe-tiny", "int4-g32"}, Case{"tiny-mixtral", "int8"}),
                         case_name);
// tiny-qwen2's intermediate 96 splits into 48 columns, which hold no int4 group: int8 only.
INSTANTIATE_TEST_SUITE_P(Schemes, QuantizedTp,
                         ::testing::Values(Case{"tiny", "int8"}, Case{"tiny", "int4"},
                                           Case{"tiny", "int4-g32"}, Case{"tiny-qwen2", "int8"},
                                           Case{"qwen3-moe-tiny", "int8"}),
                         case_name);

TEST(QuantizedEngineErrors, UnknownSchemeNamesTheAcceptedOnes) {
  Config c = test::tiny_config(test::tiny_model("tiny"));
  c.quantization = "int3";
  try {
    LLM llm(c);
    ADD_FAILURE() << "int3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'int3'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int4-g128"), std::string::npos) << e.what();
  }
}

// tiny: down_proj's 128 columns split in two are 64 each, which does not hold a group of 128.
TEST(QuantizedEngineErrors, ShardThatSplitsAGroupIsRefusedWithTheNumbers) {
  Config c = test::tiny_config(test::tiny_model("tiny"));
  c.quantization = "int4-g128";
  c.tensor_parallel_size = 2;
  try {
    LLM llm(c);
    ADD_FAILURE() << "a shard of 64 columns of an int4-g128 weight was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group 128"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[0, 64)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
