// Bad requests get a clear error; the engine's other requests run to completion.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"

namespace nanovllm {
namespace {

void expect_error(LLMEngine& engine, std::vector<int32_t> prompt, SamplingParams sp,
                  const std::string& fragment) {
  try {
    engine.add_request(std::move(prompt), sp);
    ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(BadRequests, RejectedWhileOthersComplete) {
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  config.max_model_len = 64;
  LLMEngine engine(config);
  SamplingParams good;
  good.temperature = 0.0f;
  good.max_tokens = 12;
  good.ignore_eos = true;
  int64_t a = engine.add_request({1, 2, 3}, good);
  engine.step();  // a is running
  int64_t b = engine.add_request({4, 5, 6, 7}, good);

  expect_error(engine, {}, good, "empty");
  const int vocab = test::vocab_size(model);
  expect_error(engine, {1, vocab}, good, std::to_string(vocab));
  expect_error(engine, {1, -3}, good, "-3");
  expect_error(engine, std::vector<int32_t>(64, 1), good, "max_model_len");
  SamplingParams bad = good;
  bad.max_tokens = 0;
  expect_error(engine, {1}, bad, "max_tokens");
  bad = good;
  bad.temperature = -0.5f;
  expect_error(engine, {1}, bad, "temperature");
  bad.temperature = std::numeric_limits<float>::quiet_NaN();
  expect_error(engine, {1}, bad, "temperature");
  bad = good;
  bad.top_p = 0.0f;
  expect_error(engine, {1}, bad, "top_p");

  std::map<int64_t, std::unique_ptr<Sequence>> done;
  for (int i = 0; i < 1000 && !engine.is_finished(); ++i) {
    for (auto& s : engine.step().finished) done[s->seq_id] = std::move(s);
  }
  ASSERT_TRUE(engine.is_finished());
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[a]->num_completion_tokens(), 12);
  EXPECT_EQ(done[b]->num_completion_tokens(), 12);
}

// A cache too small for max_model_len is refused at start-up (graph_ready_test); one exactly as
// large runs a request that fills it to the last block, beside another.
TEST(BadRequests, RequestFillingTheWholeCacheFinishes) {
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  const int64_t block_bytes = test::kv_block_bytes(model, 16);
  config.kv_cache_memory = 4 * block_bytes;  // 64 tokens of cache
  config.max_model_len = 65;                  // the most it holds (a longer one is refused)
  LLMEngine engine(config);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 8;
  sp.ignore_eos = true;
  int64_t big = engine.add_request(std::vector<int32_t>(60, 3), sp);
  int64_t small = engine.add_request({1, 2, 3}, sp);
  std::map<int64_t, std::unique_ptr<Sequence>> done;
  for (int i = 0; i < 1000 && !engine.is_finished(); ++i) {
    for (auto& s : engine.step().finished) done[s->seq_id] = std::move(s);
  }
  ASSERT_TRUE(engine.is_finished()) << "the engine must not hang when the cache is short";
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[big]->finish_reason, FinishReason::LENGTH) << done[big]->error;
  EXPECT_EQ(done[big]->num_tokens(), 65);
  EXPECT_EQ(done[small]->finish_reason, FinishReason::LENGTH);
  EXPECT_EQ(done[small]->num_completion_tokens(), 8);
}

TEST(BadConfig, ClearErrors) {
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  config.block_size = 0;
  EXPECT_THROW(LLMEngine{config}, Error);
  config = test::tiny_config("/nonexistent/model");
  EXPECT_THROW(LLMEngine{config}, Error);
  config = test::tiny_config(model);
  config.device = "tpu";
  EXPECT_THROW(LLMEngine{config}, Error);
}

}  // namespace
}  // namespace nanovllm
