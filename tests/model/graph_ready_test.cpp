// The graph-ready engine (fixed buffers, warm-up before the KV cache, padded decode, graphs)
// changes no output, and its start-up sizing says what it does.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "model/wrapped_backend.h"

namespace nanovllm {
namespace {

using Outputs = std::map<int64_t, std::vector<int32_t>>;

std::vector<std::vector<int32_t>> test_prompts(int n, int vocab) {
  std::mt19937 rng(77);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(size_t(1 + (i * 13) % 40));
    for (int32_t& t : p) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
    prompts.push_back(p);
  }
  return prompts;
}

// Greedy completions; request i asks for 3 + 2 i tokens, so decode batches shrink step by step
// through every bucket below the number of prompts.
Outputs run_greedy(LLMEngine& engine, const std::vector<std::vector<int32_t>>& prompts) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams sp;
    sp.temperature = 0.0f;
    sp.max_tokens = 3 + 2 * int(i);
    sp.ignore_eos = true;
    engine.add_request(prompts[i], sp);
  }
  Outputs out;
  for (int i = 0; i < 10000 && !engine.is_finished(); ++i) {
    for (auto& s : engine.step().finished) {
      EXPECT_EQ(s->finish_reason, FinishReason::LENGTH) << s->error;
      out[s->seq_id].assign(s->token_ids.begin() + s->num_prompt_tokens, s->token_ids.end());
    }
  }
  EXPECT_TRUE(engine.is_finished());
  EXPECT_EQ(engine.scheduler().block_manager().num_free_blocks(),
            engine.model_runner().num_kv_blocks());
  return out;
}

class GraphReady : public ::testing::Test {
 protected:
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  std::vector<std::vector<int32_t>> prompts = test_prompts(11, test::vocab_size(model));
};

TEST(GraphBuckets, PowersOfTwoThenSixteens) {
  EXPECT_EQ(graph_buckets(1), (std::vector<int>{1}));
  EXPECT_EQ(graph_buckets(6), (std::vector<int>{1, 2, 4, 6}));
  EXPECT_EQ(graph_buckets(16), (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(graph_buckets(50), (std::vector<int>{1, 2, 4, 8, 16, 32, 48, 50}));
  const std::vector<int> b = graph_buckets(64);
  EXPECT_EQ(bucket_for(b, 1), 1);
  EXPECT_EQ(bucket_for(b, 3), 4);
  EXPECT_EQ(bucket_for(b, 9), 16);
  EXPECT_EQ(bucket_for(b, 33), 48);
  EXPECT_EQ(bucket_for(b, 64), 64);
}

TEST_F(GraphReady, PaddedDecodeEqualsUnpadded) {
  LLMEngine plain(config);
  EXPECT_FALSE(plain.model_runner().pads_decode()) << "the CPU pads nothing by default";
  const Outputs want = run_greedy(plain, prompts);
  ASSERT_EQ(want.size(), prompts.size());

  auto backend = std::make_unique<test::WrappedBackend>();
  std::map<int64_t, int> decode_rows;  // rows of each decode attention call
  auto* wrapped = backend.get();
  LLMEngine padded(config, std::move(backend), {.pad_decode = true, .warmup = true, .rank_backend = nullptr});
  wrapped->before_op = [&](const std::string& op, int64_t rows) {
    if (op == "attention_decode") ++decode_rows[rows];
  };
  EXPECT_TRUE(padded.model_runner().pads_decode());
  EXPECT_EQ(run_greedy(padded, prompts), want);
  // 11 sequences decode as 16 lanes, then 8, 4, 2, 1 as they finish: only bucket sizes ran.
  for (auto [rows, calls] : decode_rows) {
    EXPECT_TRUE(rows == 1 || rows == 2 || rows == 4 || rows == 8 || rows == 16) << rows;
  }
  EXPECT_GT(decode_rows[16], 0);
  EXPECT_GT(decode_rows[1], 0);
}

TEST_F(GraphReady, FakeGraphsReplayTheSameTokens) {
  LLMEngine plain(config);
  const Outputs want = run_greedy(plain, prompts);

  auto backend = std::make_unique<test::WrappedBackend>();
  backend->fake_graphs = true;
  auto* wrapped = backend.get();
  config.max_num_seqs = 20;  // buckets 1, 2, 4, 8, 16, 20
  LLMEngine graphed(config, std::move(backend), {.pad_decode = std::nullopt, .warmup = true, .rank_backend = nullptr});
  const ModelRunner& runner = graphed.model_runner();
  EXPECT_EQ(runner.graphs().num_graphs(), 6);
  EXPECT_EQ(wrapped->num_captures, 1 + 6);  // the probe, then one per bucket
  EXPECT_TRUE(runner.pads_decode()) << "graphs imply padded decode batches";
  EXPECT_EQ(run_greedy(graphed, prompts), want);
  EXPECT_GT(runner.graphs().num_replays(), 0);

  auto eager_backend = std::make_unique<test::WrappedBackend>();
  eager_backend->fake_graphs = true;
  config.enforce_eager = true;
  LLMEngine eager(config, std::move(eager_backend));
  EXPECT_EQ(eager.model_runner().graphs().num_graphs(), 0) << "--enforce-eager captures nothing";
  EXPECT_EQ(run_greedy(eager, prompts), want);
}

// Qwen2 (q/k/v biases, no q/k norm) through the same padded, graph-replayed decode.
TEST(GraphReadyQwen2, FakeGraphsEqualEager) {
  const std::string model = test::tiny_model("tiny-qwen2");
  Config config = test::tiny_config(model);
  config.max_num_seqs = 12;  // buckets 1, 2, 4, 8, 12
  const auto prompts = test_prompts(9, test::vocab_size(model));
  LLMEngine plain(config);
  const Outputs want = run_greedy(plain, prompts);
  auto backend = std::make_unique<test::WrappedBackend>();
  backend->fake_graphs = true;
  LLMEngine graphed(config, std::move(backend), {.pad_decode = std::nullopt, .warmup = true, .rank_backend = nullptr});
  EXPECT_EQ(graphed.model_runner().graphs().num_graphs(), 5);
  EXPECT_EQ(run_greedy(graphed, prompts), want);
  EXPECT_GT(graphed.model_runner().graphs().num_replays(), 0);
}

// Every ForwardBatch tensor stays at one address with a fixed block-table width, whatever the
// step: prefills and decodes of different sizes.
TEST_F(GraphReady, MetadataAddressesFixedAcrossSteps) {
  LLMEngine engine(config);
  const ModelRunner& runner = engine.model_runner();
  const int width = (config.max_model_len + config.block_size - 1) / config.block_size + 1;
  EXPECT_EQ(runner.max_num_blocks_per_seq(), width);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams sp;
    sp.temperature = 0.0f;
    sp.max_tokens = 2 + int(i);
    sp.ignore_eos = true;
    engine.add_request(prompts[i], sp);
    if (i % 4 == 3) engine.step();  // interleave prefills of different sizes with decodes
  }
  std::vector<const void*> first;
  std::set<int> sizes;
  int steps = 0;
  while (!engine.is_finished()) {
    engine.step();
    const ForwardBatch& b = runner.batch();
    std::vector<const void*> ptrs = {b.input_ids.data,    b.positions.data,   b.slot_mapping.data,
                                     b.cu_seqlens_q.data, b.cu_seqlens_k.data, b.context_lens.data,
                                     b.block_tables.data, b.last_token_indices.data,
                                     b.temperatures.data, b.top_k.data,       b.top_p.data,
                                     b.seeds.data,        b.sample_offsets.data};
    if (first.empty()) first = ptrs;
    EXPECT_EQ(ptrs, first) << "step " << steps;
    EXPECT_EQ(b.block_tables.shape[1], width);
    EXPECT_EQ(b.host->max_num_blocks, width);
    sizes.insert(b.num_seqs * 2 + b.is_prefill);
    ++steps;
  }
  EXPECT_GE(sizes.size(), 6u) << "steps of several sizes, prefill and decode";
}

// The start-up warm-up runs the largest steps before the KV cache exists.
TEST_F(GraphReady, WarmupRunsTheLargestSteps) {
  auto backend = std::make_unique<test::WrappedBackend>();
  int64_t max_prefill_rows = 0, max_decode_rows = 0;
  bool in_startup = true;
  backend->before_op = [&](const std::string& op, int64_t rows) {
    if (!in_startup) return;
    if (op == "attention_prefill") max_prefill_rows = std::max(max_prefill_rows, rows);
    if (op == "attention_decode") max_decode_rows = std::max(max_decode_rows, rows);
  };
  LLMEngine engine(config, std::move(backend), {.pad_decode = std::nullopt, .warmup = true, .rank_backend = nullptr});
  in_startup = false;
  EXPECT_EQ(max_prefill_rows, config.max_num_batched_tokens);
  EXPECT_EQ(max_decode_rows, config.max_num_seqs);
  EXPECT_EQ(run_greedy(engine, prompts), run_greedy(*std::make_unique<LLMEngine>(config), prompts));
}

TEST_F(GraphReady, MaxModelLenTheCacheCannotHoldIsRefused) {
  config.kv_cache_memory = 4 * test::kv_block_bytes(model, config.block_size);  // 64 tokens
  config.max_model_len = 512;
  try {
    LLMEngine engine(config);
    FAIL() << "max_model_len 512 over 4 blocks of 16 tokens must be refused";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("max_model_len 512"), std::string::npos) << msg;
    EXPECT_NE(msg.find("32 blocks"), std::string::npos) << msg;  // ceil(511 / 16)
    EXPECT_NE(msg.find("4 blocks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--max-model-len to at most 65"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--kv-cache-memory"), std::string::npos) << msg;
  }
  config.max_model_len = 65;  // the largest that fits: 64 tokens of KV
  LLMEngine engine(config);
  EXPECT_EQ(engine.model_runner().num_kv_blocks(), 4);
}

TEST_F(GraphReady, CpuKvBudgetFromMemAvailable) {
  constexpr int64_t MiB = 1 << 20;
  auto backend = std::make_unique<test::WrappedBackend>();
  backend->fake_memory = DeviceMemory{.free_bytes = 40 * MiB, .total_bytes = 100 * MiB};
  config.kv_cache_memory = 0;
  LLMEngine engine(config, std::move(backend));
  const ModelRunner& runner = engine.model_runner();
  const int64_t reserved = runner.reserved_bytes();
  ASSERT_GT(reserved, 0);
  ASSERT_LT(reserved, 40 * MiB);
  const int64_t block = int64_t(runner.kv_block_bytes());
  EXPECT_EQ(runner.num_kv_blocks(), (40 * MiB - reserved) / 2 / block);

  // The rule itself: half of what is left, at most 4 GiB on the CPU; CUDA as nano-vllm.
  constexpr int64_t GiB = int64_t(1) << 30;
  EXPECT_EQ(default_kv_cache_bytes(DeviceKind::CPU, {10 * GiB, 16 * GiB}, 0.9f, 2 * GiB), 4 * GiB);
  EXPECT_EQ(default_kv_cache_bytes(DeviceKind::CPU, {3 * GiB, 16 * GiB}, 0.9f, GiB), GiB);
  EXPECT_EQ(default_kv_cache_bytes(DeviceKind::CPU, {GiB, 16 * GiB}, 0.9f, 2 * GiB), 0);
  EXPECT_EQ(default_kv_cache_bytes(DeviceKind::CUDA, {70 * GiB, 80 * GiB}, 0.5f, 0), 30 * GiB);
  EXPECT_EQ(default_kv_cache_bytes(DeviceKind::CUDA, {10 * GiB, 80 * GiB}, 0.5f, 0), 0);

  // Too little memory for max_model_len: refused, naming the default's source.
  auto poor = std::make_unique<test::WrappedBackend>();
  poor->fake_memory = DeviceMemory{.free_bytes = reserved + 8 * block, .total_bytes = 100 * MiB};
  try {
    LLMEngine small(config, std::move(poor));
    FAIL() << "4 blocks cannot hold max_model_len 512";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MemAvailable"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
