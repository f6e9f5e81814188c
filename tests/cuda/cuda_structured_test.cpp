// Structured outputs on the CUDA engine (label cuda; under the emulator in CI): a step with a
// constrained sequence hands its logits to the host sampler with the grammar's bitmask, so every
// constrained output is in its language (a choice exactly; a regex, checked here with std::regex;
// a JSON object parsed by nlohmann), and free requests in the same batches -- CUDA graphs
// included -- give the tokens they give alone. Emulated, Qwen3's 151,936-row lm_head makes it a
// minute and a half: label heavy there (tests/cuda_emu/cuda_emu.cmake), cuda on a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "model/make_model.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/test_util.h"

namespace nanovllm {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

Config cuda_config() {
  Config c = test::tiny_config(test::tiny_text_model());
  c.device = "cuda";
  c.kv_cache_memory = 4 << 20;
  return c;
}

TEST(CudaStructured, ConstrainedOutputsValidFreeOnesUnchanged) {
  const Prompts prompts = test::random_prompts(2, 150000, 4, 24, 13);
  SamplingParams free;
  free.temperature = 0.0f;
  free.max_tokens = 12;
  free.ignore_eos = true;
  std::vector<SamplingParams> constrained(3);
  constrained[0].structured_outputs.emplace().choice = std::vector<std::string>{"alpha", "beta", "gamma delta"};
  constrained[1].structured_outputs.emplace().regex = R"R(\d{3}-[a-z]{2,6})R";
  constrained[2].structured_outputs.emplace().json_object = true;
  for (SamplingParams& sp : constrained) {
    sp.temperature = 1.0f;
    sp.seed = 7;
    sp.max_tokens = 24;
  }
  Prompts batch;
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (const SamplingParams& sp : constrained) {
      batch.push_back(prompts[i]);
      params.push_back(sp);
    }
    batch.push_back(prompts[i]);
    params.push_back(free);
  }
  LLM llm(cuda_config());
  const std::vector<GenerationOutput> mixed = llm.generate(batch, params);
  const std::vector<GenerationOutput> alone = llm.generate(prompts, {free});
  ASSERT_EQ(mixed.size(), batch.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerationOutput& choice = mixed[4 * i];
    EXPECT_EQ(choice.finish_reason, "stop") << choice.error;
    EXPECT_TRUE(choice.text == "alpha" || choice.text == "beta" || choice.text == "gamma delta") << choice.text;
    const GenerationOutput& re = mixed[4 * i + 1];
    EXPECT_EQ(re.finish_reason, "stop") << re.error;
    EXPECT_TRUE(std::regex_match(re.text, std::regex(R"R([0-9]{3}-[a-z]{2,6})R"))) << re.text;
    const GenerationOutput& obj = mixed[4 * i + 2];
    EXPECT_NE(obj.finish_reason, "error") << obj.error;
    if (obj.finish_reason == "stop") {
      const nlohmann::json j = nlohmann::json::parse(obj.text, nullptr, false);
      EXPECT_TRUE(j.is_object()) << obj.text;
    }
    EXPECT_EQ(mixed[4 * i + 3].token_ids, alone[i].token_ids) << "free request " << i;
  }
}

}  // namespace
}  // namespace nanovllm
