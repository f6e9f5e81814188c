// Engine features shown invisible: greedy outputs identical with each on and off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "backend/cpu/gemm.h"
#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "util/check.h"

namespace nanovllm {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  return p;
}

std::vector<std::vector<int32_t>> greedy(const Config& config, const Prompts& prompts, int max_tokens,
                                         int64_t* preemptions = nullptr) {
  LLM llm(config);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  std::vector<std::vector<int32_t>> ids;
  for (const GenerationOutput& o : llm.generate(prompts, {sp})) {
    EXPECT_EQ(o.finish_reason, "length") << o.error;
    ids.push_back(o.token_ids);
  }
  if (preemptions) *preemptions = llm.engine().scheduler().num_preemptions();
  // Everything freed at the end.
  EXPECT_EQ(llm.engine().scheduler().block_manager().num_free_blocks(),
            llm.engine().model_runner().num_kv_blocks());
  return ids;
}

class Invariants : public ::testing::Test {
 protected:
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  std::mt19937 rng{1234};
  int vocab = test::vocab_size(model);
  // Prefix cache on = off, chunked prefill (both schedulings) = one step, batch = alone, over
  // prompts sharing a prefix and prompts longer than the chunk budget.
  void check_invariants();
};

TEST_F(Invariants, PrefixCacheOnEqualsOff) {
  // Prompts sharing long prefixes, and a repeated prompt whose length is a multiple of the
  // block size (16).
  std::vector<int32_t> shared = random_tokens(rng, 40, vocab);
  Prompts prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = shared;
    std::vector<int32_t> tail = random_tokens(rng, 3 + 5 * i, vocab);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  std::vector<int32_t> exact = random_tokens(rng, 32, vocab);
  prompts.push_back(exact);
  prompts.push_back(exact);
  prompts.push_back(shared);
  // Run twice in one engine so that the second call hits blocks cached by the first.
  Config on = config, off = config;
  off.enable_prefix_caching = false;
  auto want = greedy(off, prompts, 24);
  LLM llm(on);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  for (int round = 0; round < 2; ++round) {
    auto outs = llm.generate(prompts, {sp});
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(outs[i].token_ids, want[i]) << round << ":" << i;
  }
  // One at a time too: each later prompt finds the shared prefix cached.
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto outs = llm.generate({prompts[i]}, {sp});
    EXPECT_EQ(outs[0].token_ids, want[i]) << "alone " << i;
  }
}

// Config::kv_cache_prefault (nanovllm bench) writes the whole cache at startup: the same tokens.
TEST_F(Invariants, KvCachePrefaultEqualsOff) {
  Prompts prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(random_tokens(rng, 9 + 11 * i, vocab));
  Config prefault = config;
  prefault.kv_cache_prefault = true;
  EXPECT_EQ(greedy(prefault, prompts, 20), greedy(config, prompts, 20));
}

TEST_F(Invariants, PreemptionEqualsLargeCache) {
  Prompts prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_tokens(rng, 20 + 7 * i, vocab));
  auto want = greedy(config, prompts, 40);
  Config small = config;
  // 12 blocks of 16 tokens: every sequence fits alone (<= 4 blocks) but not all together.
  const int64_t block_bytes = test::kv_block_bytes(model, 16);
  small.kv_cache_memory = 12 * block_bytes;
  small.max_model_len = 12 * 16 + 1;  // what the cache holds (a longer one is refused)
  int64_t preemptions = 0;
  auto got = greedy(small, prompts, 40, &preemptions);
  EXPECT_GT(preemptions, 0) << "the small cache should have forced a preemption";
  EXPECT_EQ(got, want);
}

TEST_F(Invariants, ChunkedPrefillEqualsLargeBudget) {
  Prompts prompts = {random_tokens(rng, 150, vocab), random_tokens(rng, 20, vocab),
                     random_tokens(rng, 97, vocab)};
  auto want = greedy(config, prompts, 16);
  Config chunked = config;
  chunked.max_num_batched_tokens = 32;  // every long prompt is prefilled in chunks
  for (const char* scheduling : {"mixed", "prefill_first"}) {
    chunked.scheduling = scheduling;
    EXPECT_EQ(greedy(chunked, prompts, 16), want) << scheduling;
  }
}

// The opt-in bf16 prefill attention (NANOVLLM_PREFILL_ATTENTION=bf16, where the GEMMs run on
// AVX-512 BF16) keeps every row's arithmetic independent of its chunk and batch: chunked prefill,
// prefix caching and batching still change no token.
TEST_F(Invariants, Bf16PrefillAttentionKeepsTheInvariants) {
  const char* saved = std::getenv("NANOVLLM_PREFILL_ATTENTION");
  const std::string keep = saved ? saved : "";
  setenv("NANOVLLM_PREFILL_ATTENTION", "bf16", 1);
  // Asked for where it cannot run (no AVX-512 BF16, or NANOVLLM_CPU_ISA=avx2): a clear error.
  if (!cpu::bf16_prefill_available(cpu::cpu_isa_from_env())) {
    EXPECT_THROW(LLM probe(config), Error);
  } else {
    LLM probe(config);
    EXPECT_NE(probe.engine().backend().describe().find("prefill attention bf16"), std::string::npos)
        << probe.engine().backend().describe();
    check_invariants();
  }
  if (saved) setenv("NANOVLLM_PREFILL_ATTENTION", keep.c_str(), 1);
  else unsetenv("NANOVLLM_PREFILL_ATTENTION");
}

void Invariants::check_invariants() {
  std::vector<int32_t> shared = random_tokens(rng, 40, vocab);
  Prompts prompts = {random_tokens(rng, 150, vocab), random_tokens(rng, 20, vocab),
                     random_tokens(rng, 97, vocab), shared};
  for (int i = 0; i < 2; ++i) {
    std::vector<int32_t> p = shared;
    std::vector<int32_t> tail = random_tokens(rng, 5 + 9 * i, vocab);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  Config off = config;
  off.enable_prefix_caching = false;
  const auto want = greedy(off, prompts, 16);
  EXPECT_EQ(greedy(config, prompts, 16), want) << "prefix cache on";
  Config chunked = config;
  chunked.max_num_batched_tokens = 32;
  for (const char* scheduling : {"mixed", "prefill_first"}) {
    chunked.scheduling = scheduling;
    EXPECT_EQ(greedy(chunked, prompts, 16), want) << "chunked, " << scheduling;
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(greedy(off, {prompts[i]}, 16)[0], want[i]) << "alone: prompt " << i;
}

// generate's last progress call counts every step of the call (nanovllm bench's phases come from
// it). The engine thread observes a step after pushing its events, so the calling thread could
// see every request finish and return with the last step uncounted: a one-step call then reported
// no prefill at all. Repeated, since that depended on which thread ran first.
TEST_F(Invariants, LastProgressCountsEveryStep) {
  Prompts prompts;
  int64_t prompt_tokens = 0;
  for (int n : {9, 30, 4}) {
    prompts.push_back(random_tokens(rng, n, vocab));
    prompt_tokens += n;
  }
  Config c = config;
  c.enable_prefix_caching = false;  // every prompt token computed, every time
  LLM llm(c);
  for (int i = 0; i < 60; ++i) {
    const int max_tokens = i % 4 == 3 ? 2 : 1;
    SamplingParams sp;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    GenerateProgress last;
    int calls = 0;
    llm.generate(prompts, {sp}, nullptr, [&](const GenerateProgress& p) {
      last = p;
      ++calls;
    });
    ASSERT_GT(calls, 0);
    EXPECT_EQ(last.num_finished, 3);
    EXPECT_EQ(last.num_prefill_tokens, prompt_tokens) << "max_tokens " << max_tokens;
    EXPECT_EQ(last.num_decode_tokens, 3 * (max_tokens - 1)) << "max_tokens " << max_tokens;
    EXPECT_EQ(last.num_steps, max_tokens);
    EXPECT_GT(last.prefill_seconds, 0.0);
  }
}

TEST_F(Invariants, BatchEqualsAlone) {
  Prompts prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(random_tokens(rng, 1 + 9 * i, vocab));
  auto batched = greedy(config, prompts, 20);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(greedy(config, {prompts[i]}, 20)[0], batched[i]) << "prompt " << i;
  }
}

TEST_F(Invariants, SeededSamplingIsReproducibleAndBatchIndependent) {
  Prompts prompts = {random_tokens(rng, 10, vocab), random_tokens(rng, 30, vocab)};
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  sp.seed = 42;
  LLM llm(config);
  auto together = llm.generate(prompts, {sp});
  auto alone = llm.generate({prompts[1]}, {sp});
  EXPECT_EQ(together[1].token_ids, alone[0].token_ids);
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

// Block size, token budget, cache size, sequence limit and prefix caching drawn at random: the
// greedy outputs never change (odd block sizes and tiny budgets stress the paged attention
// block tables, chunking and preemption together).
TEST(InvariantsRandom, EngineConfigsAgree) {
  std::string model = test::tiny_model("tiny");
  const int vocab = test::vocab_size(model);
  std::mt19937 rng(99);
  Prompts prompts;
  std::vector<int32_t> shared = random_tokens(rng, 23, vocab);
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = i % 2 ? shared : std::vector<int32_t>{};
    std::vector<int32_t> tail = random_tokens(rng, 1 + 13 * i, vocab);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size() + 16);
  Config base = test::tiny_config(model);
  base.scheduling = "prefill_first";
  auto want = greedy(base, prompts, 16);
  const int block_sizes[] = {1, 3, 7, 16, 32};
  int64_t total_preemptions = 0;
  for (int trial = 0; trial < 24; ++trial) {
    Config c = base;
    c.block_size = block_sizes[rng() % 5];
    c.max_num_batched_tokens = 8 + int(rng() % 64);
    c.max_num_seqs = 1 + int(rng() % 6);
    c.enable_prefix_caching = rng() % 2;
    c.scheduling = trial % 2 ? "mixed" : "prefill_first";  // both step policies, same tokens
    // Enough blocks for the longest request alone (prompt + 16 tokens), sometimes barely.
    const int64_t blocks = int64_t(longest + c.block_size - 1) / c.block_size + int64_t(rng() % 40);
    c.kv_cache_memory = blocks * test::kv_block_bytes(model, c.block_size);
    c.max_model_len = int(std::min<int64_t>(base.max_model_len, blocks * c.block_size + 1));
    int64_t preemptions = 0;
    EXPECT_EQ(greedy(c, prompts, 16, &preemptions), want)
        << "block_size " << c.block_size << ", budget " << c.max_num_batched_tokens << ", seqs "
        << c.max_num_seqs << ", prefix cache " << c.enable_prefix_caching << ", blocks " << blocks
        << ", scheduling " << c.scheduling;
    total_preemptions += preemptions;
  }
  EXPECT_GT(total_preemptions, 0) << "some trial should have been short of blocks";
  std::printf("24 random engine configs, %lld preemptions in all\n", (long long)total_preemptions);
}

}  // namespace
}  // namespace nanovllm
