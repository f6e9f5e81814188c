// Failure atomicity: a step whose forward throws (a fault injected into one op) ends the
// sequences it ran with an error and leaves the engine as before: no block leaked, no prefix-cache
// hash published for KV the step did not write, and every other request finishing with the tokens
// it gets without the fault.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "model/wrapped_backend.h"

namespace nanovllm {
namespace {

using Tokens = std::vector<int32_t>;

Tokens random_tokens(std::mt19937& rng, int n, int vocab) {
  Tokens p(size_t(n), 0);
  for (int32_t& t : p) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  return p;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  return sp;
}

// Completion of each prompt alone on a plain engine.
Tokens alone(const Config& config, const Tokens& prompt, int max_tokens) {
  LLMEngine engine(config);
  engine.add_request(prompt, greedy(max_tokens));
  while (!engine.is_finished()) {
    for (auto& s : engine.step().finished) {
      return Tokens(s->token_ids.begin() + s->num_prompt_tokens, s->token_ids.end());
    }
  }
  return {};
}

// (block, hash) of every published block.
std::set<std::pair<int, uint64_t>> published(const LLMEngine& engine) {
  const BlockManager& bm = engine.scheduler().block_manager();
  std::set<std::pair<int, uint64_t>> out;
  for (int i = 0; i < bm.num_blocks(); ++i) {
    if (auto h = bm.block_hash(i)) out.emplace(i, *h);
  }
  return out;
}

struct FaultyEngine {
  explicit FaultyEngine(const Config& config) {
    auto backend = std::make_unique<test::WrappedBackend>();
    wrapped = backend.get();
    wrapped->before_op = [this](const std::string& op, int64_t) {
      if (op != fault_op) return;
      if (++calls == fail_at_call) throw Error("injected fault in " + op);
    };
    engine = std::make_unique<LLMEngine>(config, std::move(backend));
  }
  // Runs to the end; returns the completions of the finished requests by id.
  std::map<int64_t, std::unique_ptr<Sequence>> drain() {
    std::map<int64_t, std::unique_ptr<Sequence>> done;
    for (int i = 0; i < 10000 && !engine->is_finished(); ++i) {
      for (auto& s : engine->step().finished) done[s->seq_id] = std::move(s);
    }
    EXPECT_TRUE(engine->is_finished());
    return done;
  }
  test::WrappedBackend* wrapped = nullptr;
  std::unique_ptr<LLMEngine> engine;
  std::string fault_op;
  int calls = 0;
  int fail_at_call = -1;
};

Tokens completion(const Sequence& s) {
  return Tokens(s.token_ids.begin() + s.num_prompt_tokens, s.token_ids.end());
}

class StepFailure : public ::testing::Test {
 protected:
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  std::mt19937 rng{4321};
  int vocab = test::vocab_size(model);
};

// Two sequences decode; the step that computes the 16th token of the first one (filling its first
// block) fails in layer 1, after layer 0 stored its KV. Both end with an error; the two waiting
// requests then finish as they would alone; and a new request extending the failed sequence's 16
// tokens does not reuse that block (its KV was never fully written).
TEST_F(StepFailure, DecodeFaultEndsOnlyTheStepsSequences) {
  config.max_num_seqs = 2;
  const Tokens p = random_tokens(rng, 10, vocab), r = random_tokens(rng, 7, vocab);
  const Tokens w1 = random_tokens(rng, 25, vocab), w2 = random_tokens(rng, 3, vocab);
  FaultyEngine f(config);
  LLMEngine& engine = *f.engine;
  const int64_t id_p = engine.add_request(p, greedy(20));
  const int64_t id_r = engine.add_request(r, greedy(20));
  const int64_t id_w1 = engine.add_request(w1, greedy(12));
  const int64_t id_w2 = engine.add_request(w2, greedy(12));
  // The prefill computes positions < 10 of p; decode step j computes position 9 + j: the 6th
  // decode step computes position 15. attention_decode runs once per layer (2 layers).
  f.fault_op = "attention_decode";
  f.fail_at_call = 2 * 5 + 2;
  engine.step();  // prefill of p and r
  for (int j = 1; j <= 5; ++j) EXPECT_TRUE(engine.step().finished.empty());
  const auto hashes_before = published(engine);
  StepResult failed = engine.step();
  ASSERT_EQ(f.calls, f.fail_at_call) << "the fault fired";
  ASSERT_EQ(failed.finished.size(), 2u);
  EXPECT_TRUE(failed.new_tokens.empty());
  Tokens p_tokens;
  for (const auto& s : failed.finished) {
    EXPECT_TRUE(s->seq_id == id_p || s->seq_id == id_r);
    EXPECT_EQ(s->finish_reason, FinishReason::ERROR);
    EXPECT_NE(s->error.find("injected fault in attention_decode"), std::string::npos) << s->error;
    EXPECT_TRUE(s->block_table.empty());
    if (s->seq_id == id_p) p_tokens = s->token_ids;
  }
  ASSERT_EQ(p_tokens.size(), 16u) << "p's 16th token was being computed";
  const BlockManager& bm = engine.scheduler().block_manager();
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks()) << "no block leaked";
  for (const auto& entry : published(engine)) {
    EXPECT_TRUE(hashes_before.count(entry)) << "block " << entry.first << " was published by the failed step";
  }

  // The engine goes on: the waiting requests, then one that extends p's 16 tokens.
  Tokens q = p_tokens;
  for (int32_t t : random_tokens(rng, 4, vocab)) q.push_back(t);
  auto done = f.drain();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(completion(*done.at(id_w1)), alone(config, w1, 12));
  EXPECT_EQ(completion(*done.at(id_w2)), alone(config, w2, 12));
  const int64_t id_q = engine.add_request(q, greedy(8));
  done = f.drain();
  ASSERT_EQ(done.count(id_q), 1u);
  EXPECT_EQ(done.at(id_q)->finish_reason, FinishReason::LENGTH) << done.at(id_q)->error;
  EXPECT_EQ(completion(*done.at(id_q)), alone(config, q, 8));
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
}

// A chunked prefill fails in its second chunk while another sequence waits in decode: only the
// prefilling request ends (its first chunk's blocks stay validly cached); the decoding one and a
// retry of the failed prompt finish as they would alone.
TEST_F(StepFailure, ChunkedPrefillFaultEndsOnlyThatRequest) {
  config.max_num_batched_tokens = 32;
  // prefill_first: a's decodes wait while b's prompt runs (a mixed step would carry a's decode
  // with b's chunk, and its failure would end both, as any failed step ends all its sequences).
  config.scheduling = "prefill_first";
  const Tokens a = random_tokens(rng, 12, vocab), b = random_tokens(rng, 70, vocab);
  FaultyEngine f(config);
  LLMEngine& engine = *f.engine;
  const int64_t id_a = engine.add_request(a, greedy(16));
  engine.step();  // a's prefill
  engine.step();  // a's first decode
  const BlockManager& bm = engine.scheduler().block_manager();
  const int free_before = bm.num_free_blocks();
  const int64_t id_b = engine.add_request(b, greedy(6));
  f.fault_op = "attention_prefill";
  f.fail_at_call = f.calls + 2 + 1;  // chunk 1 runs (2 layers), chunk 2 fails in layer 0
  EXPECT_TRUE(engine.step().finished.empty());  // b's tokens [0, 32)
  const auto hashes_before = published(engine);
  StepResult failed = engine.step();            // b's tokens [32, 64): the fault
  ASSERT_EQ(failed.finished.size(), 1u);
  EXPECT_EQ(failed.finished[0]->seq_id, id_b);
  EXPECT_EQ(failed.finished[0]->finish_reason, FinishReason::ERROR);
  EXPECT_NE(failed.finished[0]->error.find("injected fault"), std::string::npos);
  EXPECT_EQ(bm.num_free_blocks(), free_before) << "b's blocks all freed";
  for (const auto& entry : published(engine)) {
    EXPECT_TRUE(hashes_before.count(entry)) << "block " << entry.first << " published by the failed step";
  }
  const int64_t id_b2 = engine.add_request(b, greedy(6));
  auto done = f.drain();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(completion(*done.at(id_a)), alone(config, a, 16));
  EXPECT_EQ(completion(*done.at(id_b2)), alone(config, b, 6));
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
}

}  // namespace
}  // namespace nanovllm
