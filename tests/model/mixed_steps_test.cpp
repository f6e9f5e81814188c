// Mixed steps (Config::scheduling "mixed": decodes and prompt chunks in one step) give the same
// greedy tokens as prefill_first steps, on tiny Qwen3 and Qwen2 models, with requests arriving
// while others decode, chunked prompts, shared prefixes in the prefix cache and preemption. Each
// run also shows that mixed steps happened (and none under prefill_first), so the comparison
// covers the attention split (decode rows through attention_decode, chunks through
// attention_prefill, in the same layer).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"

namespace nanovllm {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

struct RunResult {
  std::vector<std::vector<int32_t>> outputs;  // completion tokens, in prompt order
  int mixed_steps = 0;                        // steps with decodes and prompt tokens
  int64_t preemptions = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;  // the steps' counts, summed
};

// Adds prompts[i] before step i * arrive_every and steps until every request has finished.
RunResult run(const Config& config, const Prompts& prompts, int max_tokens, int arrive_every) {
  LLMEngine engine(config);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  RunResult r;
  r.outputs.resize(prompts.size());
  std::map<int64_t, size_t> index;
  size_t next = 0;
  for (int step = 0; step < 100000 && (next < prompts.size() || !engine.is_finished()); ++step) {
    if (next < prompts.size() && step % arrive_every == 0) {
      index[engine.add_request(prompts[next], sp)] = next;
      ++next;
    }
    StepResult s = engine.step();
    if (s.num_decode_tokens > 0 && s.num_prefill_tokens > 0) ++r.mixed_steps;
    r.prefill_tokens += s.num_prefill_tokens;
    r.decode_tokens += s.num_decode_tokens;
    for (const auto& f : s.finished) {
      EXPECT_EQ(f->finish_reason, FinishReason::LENGTH) << f->error;
      r.outputs[index.at(f->seq_id)] =
          std::vector<int32_t>(f->token_ids.begin() + f->num_prompt_tokens, f->token_ids.end());
    }
  }
  EXPECT_TRUE(engine.is_finished());
  r.preemptions = engine.scheduler().num_preemptions();
  EXPECT_EQ(engine.scheduler().block_manager().num_free_blocks(),
            engine.model_runner().num_kv_blocks());
  return r;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  return p;
}

class MixedSteps : public ::testing::TestWithParam<const char*> {
 protected:
  std::string model = test::tiny_model(GetParam());
  Config config = test::tiny_config(model);
  std::mt19937 rng{2024};
  int vocab = test::vocab_size(model);

  // Runs both modes and checks they agree; returns the mixed run.
  RunResult both(Config c, const Prompts& prompts, int max_tokens, int arrive_every) {
    c.scheduling = "prefill_first";
    RunResult first = run(c, prompts, max_tokens, arrive_every);
    c.scheduling = "mixed";
    RunResult mixed = run(c, prompts, max_tokens, arrive_every);
    EXPECT_EQ(first.mixed_steps, 0);
    EXPECT_GT(mixed.mixed_steps, 0) << "the workload should have mixed decodes and prompt chunks";
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(mixed.outputs[i].size(), size_t(max_tokens)) << i;
      EXPECT_EQ(mixed.outputs[i], first.outputs[i]) << "prompt " << i;
    }
    return mixed;
  }
};

TEST_P(MixedSteps, ChunkedPromptsArrivingWhileOthersDecode) {
  Prompts prompts;
  for (int n : {5, 150, 20, 97, 1, 64, 33}) prompts.push_back(random_tokens(rng, n, vocab));
  Config c = config;
  c.max_num_batched_tokens = 32;  // long prompts in chunks next to the decodes
  both(c, prompts, 20, 3);
  c.enable_prefix_caching = false;
  both(c, prompts, 20, 2);
}

TEST_P(MixedSteps, SharedPrefixesFromThePrefixCache) {
  std::vector<int32_t> shared = random_tokens(rng, 40, vocab);
  Prompts prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = shared;
    std::vector<int32_t> tail = random_tokens(rng, 1 + 7 * i, vocab);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  prompts.push_back(shared);  // a prompt of exactly cached blocks... and a bit
  Config c = config;
  c.max_num_batched_tokens = 24;
  both(c, prompts, 16, 2);
}

TEST_P(MixedSteps, PreemptionUnderASmallCache) {
  Prompts prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_tokens(rng, 20 + 7 * i, vocab));
  Config c = config;
  c.max_num_batched_tokens = 32;
  c.kv_cache_memory = 12 * test::kv_block_bytes(model, 16);  // 12 blocks: not all fit together
  c.max_model_len = 12 * 16 + 1;
  RunResult mixed = both(c, prompts, 40, 1);
  EXPECT_GT(mixed.preemptions, 0) << "the small cache should have forced a preemption";
}

// The steps count every prompt token computed and every decode (nanovllm bench's phases and the
// progress bar's rates come from these), also for a prompt whose only output token its last
// chunk samples (the step that finishes it).
TEST_P(MixedSteps, StepsCountEveryTokenTheyCompute) {
  Prompts prompts;
  int64_t prompt_tokens = 0;
  for (int n : {5, 70, 1, 33}) {
    prompts.push_back(random_tokens(rng, n, vocab));
    prompt_tokens += n;
  }
  Config c = config;
  c.max_num_batched_tokens = 32;  // the 70-token prompt in chunks
  c.enable_prefix_caching = false;
  for (const char* scheduling : {"prefill_first", "mixed"}) {
    c.scheduling = scheduling;
    for (int max_tokens : {1, 3}) {
      RunResult r = run(c, prompts, max_tokens, 1);
      EXPECT_EQ(r.prefill_tokens, prompt_tokens) << scheduling << ", max_tokens " << max_tokens;
      EXPECT_EQ(r.decode_tokens, int64_t(prompts.size()) * (max_tokens - 1))
          << scheduling << ", max_tokens " << max_tokens;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, MixedSteps,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-llama", "tiny-mistral", "qwen3-moe-tiny", "tiny-mixtral"),
                         [](const auto& info) {
                           std::string p = info.param;
                           if (p == "tiny") return std::string("qwen3");
                           if (p.rfind("tiny-", 0) == 0) p = p.substr(5);
                           for (char& ch : p) ch = ch == '-' ? '_' : ch;
                           return p;
                         });

}  // namespace
}  // namespace nanovllm
