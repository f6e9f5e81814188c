// SamplingParams::prompt_logprobs against the independent reference forward (tests/reference):
// every prompt token's logprob, rank and top tokens, and the same values whatever the engine does
// around them (chunked prefill, prefix cache, preemption, batching, n > 1, mixed steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/prompt_logprobs_check.h"
#include "reference/reference_model.h"
#include "util/check.h"

namespace nanovllm {
namespace {

std::vector<GenerationOutput> run(const Config& config, const std::vector<std::vector<int32_t>>& prompts,
                                  int prompt_logprobs, int n = 1) {
  LLM llm(config);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 2;
  sp.ignore_eos = true;
  sp.n = n;
  sp.prompt_logprobs = prompt_logprobs;
  return llm.generate(prompts, {sp});
}

class PromptLogprobs : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptLogprobs, MatchTheReferenceForward) {
  const std::string model = test::tiny_model(GetParam());
  ref::ReferenceModel reference(model, ref::Precision::kBf16Storage);
  const auto prompts = test::random_prompts(6, reference.config().vocab_size, 2, 70, 3);
  const double worst = test::check_prompt_logprobs(run(test::tiny_config(model), prompts, 5), prompts, reference, 5, 1e-2);
  std::printf("%s: largest prompt logprob error / max |logit| = %.2e\n", GetParam().c_str(), worst);
}

// Chunked prefill (16-token steps), prefix cache hits of an earlier request, preemption (a
// cache of a few blocks), mixed steps and n = 2 all give the same prompt logprobs as one plain
// prefill (within the reference tolerance: chunking changes the summation order).
TEST_P(PromptLogprobs, TheSameWithEveryEngineFeature) {
  const std::string model = test::tiny_model(GetParam());
  ref::ReferenceModel reference(model, ref::Precision::kBf16Storage);
  auto prompts = test::random_prompts(5, reference.config().vocab_size, 40, 60, 9);
  prompts.push_back(prompts[0]);  // the same prompt again: its blocks are in the cache by then
  const Config base = test::tiny_config(model);
  Config chunked = base, small = base, mixed = base, prefill_first = base;
  chunked.max_num_batched_tokens = 16;
  small.kv_cache_memory = 8 * test::kv_block_bytes(model, base.block_size);
  small.max_model_len = 8 * 16;
  mixed.max_num_batched_tokens = 24;  // decodes and prompt chunks share steps (the default policy)
  prefill_first.scheduling = "prefill_first";
  for (const Config& c : {base, chunked, small, mixed, prefill_first}) {
    test::check_prompt_logprobs(run(c, prompts, 3), prompts, reference, 3, 1e-2);
  }
  std::vector<GenerationOutput> two = run(base, prompts, 2, /*n=*/2);
  test::check_prompt_logprobs(two, prompts, reference, 2, 1e-2);
  for (const auto& o : two) {
    ASSERT_EQ(o.samples.size(), 2u);
    EXPECT_TRUE(o.samples[1].prompt_logprobs.empty());  // sample 0 reports them
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, PromptLogprobs, ::testing::Values("tiny", "tiny-qwen2"));

TEST(PromptLogprobsAll, MinusOneGivesTheWholeVocabulary) {
  const std::string model = test::tiny_model("tiny");
  const int vocab = test::vocab_size(model);
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}};
  std::vector<GenerationOutput> outs = run(test::tiny_config(model), prompts, -1);
  ASSERT_EQ(outs[0].prompt_logprobs.size(), 4u);
  for (const StepLogprobs& lp : outs[0].prompt_logprobs) {
    ASSERT_EQ(int(lp.top.size()), vocab);
    double mass = 0;
    std::vector<bool> seen(size_t(vocab), false);
    for (const Logprob& l : lp.top) {
      mass += std::exp(double(l.logprob));
      seen[size_t(l.token_id)] = true;
    }
    EXPECT_NEAR(mass, 1.0, 1e-4);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), vocab);
  }
}

TEST(PromptLogprobsAll, OutOfRangeIsRefused) {
  const std::string model = test::tiny_model("tiny");
  LLM llm(test::tiny_config(model));
  for (int bad : {-2, 21}) {
    SamplingParams sp;
    sp.prompt_logprobs = bad;
    try {
      llm.generate(std::vector<std::vector<int32_t>>{{1, 2}}, {sp});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("prompt_logprobs must be in [0, 20] or -1"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nanovllm
