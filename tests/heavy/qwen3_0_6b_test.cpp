// Qwen3-0.6B shapes end to end (label `heavy`: CI skips it; ~1 minute on 2 cores):
// last-token logits against the fp32 reference, and greedy outputs with and without the prefix
// cache and chunked prefill.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "engine/llm_engine.h"
#include "model/make_model.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/reference_model.h"

namespace nanovllm {
namespace {

std::string qwen3_0_6b() {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("nanovllm-heavy-0.6b-" + std::to_string(::getpid()));
  if (!fs::exists(dir / "config.json")) {
    test::remove_at_exit(dir);
    MakeModelOptions o;
    o.preset = "qwen3-0.6b";
    o.out = dir.string();
    make_model(o);
  }
  return dir.string();
}

Config config_for(const std::string& model) {
  Config c;
  c.model = model;
  c.block_size = 16;
  c.kv_cache_memory = int64_t(256) << 20;
  c.max_model_len = 1024;
  c.show_progress = false;
  return c;
}

TEST(Qwen3_0_6B, LogitsMatchReferenceAndFeaturesAreInvisible) {
  const std::string model = qwen3_0_6b();
  std::vector<int32_t> prompt = {785, 6722, 315, 9625, 374, 12095, 11, 323, 279, 6722, 315, 9856};
  {
    ref::ReferenceModel reference(model);
    LLMEngine engine(config_for(model));
    const double err = test::relative_error(test::prefill_logits(engine, prompt), reference.last_logits(prompt));
    std::printf("qwen3-0.6b: logit error / max |logit| = %.2e\n", err);
    EXPECT_LT(err, 1e-2);
  }
  // Shared prefixes, prefix cache on vs off, chunked vs not.
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = prompt;
    for (int j = 0; j < 20 + 9 * i; ++j) p.push_back(int32_t((j * 7919 + i * 104729) % 150000));
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  Config plain = config_for(model);
  plain.enable_prefix_caching = false;
  std::vector<GenerationOutput> want = LLM(plain).generate(prompts, {sp});
  Config features = config_for(model);
  features.max_num_batched_tokens = 24;  // chunked prefill
  LLM llm(features);
  for (int round = 0; round < 2; ++round) {  // the second round hits the prefix cache
    std::vector<GenerationOutput> got = llm.generate(prompts, {sp});
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].token_ids, want[i].token_ids) << round << ":" << i;
  }
}

}  // namespace
}  // namespace nanovllm
