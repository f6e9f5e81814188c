// Bad requests get a clear error; the engine's other requests run to completion.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "model/wrapped_backend.h"

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

// NANOVLLM_PROFILE_STEPS opens the backend's profiler window before step FIRST and closes it
// after step LAST, with the forward's ops of those steps inside; a malformed value is a clear
// error at construction.
TEST(BadConfig, ProfileStepsWindow) {
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  for (const char* bad : {"5", "3:2", "0:1", "1:2x", "a:b"}) {
    setenv("NANOVLLM_PROFILE_STEPS", bad, 1);
    try {
      LLMEngine engine(config);
      ADD_FAILURE() << "NANOVLLM_PROFILE_STEPS=" << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("NANOVLLM_PROFILE_STEPS"), std::string::npos) << e.what();
    }
  }
  setenv("NANOVLLM_PROFILE_STEPS", "2:3", 1);
  auto backend = std::make_unique<test::WrappedBackend>();
  auto* wrapped = backend.get();
  int ops_in_window = 0;
  wrapped->before_op = [&](const std::string&, int64_t) {
    ops_in_window += !wrapped->profile_windows.empty() && wrapped->profile_windows.back();
  };
  LLMEngine engine(config, std::move(backend));
  unsetenv("NANOVLLM_PROFILE_STEPS");
  SamplingParams sp;
  sp.max_tokens = 6;
  sp.ignore_eos = true;
  engine.add_request({1, 2, 3}, sp);
  for (int step = 1; step <= 5; ++step) {
    engine.step();
    if (step == 1) {
      EXPECT_TRUE(wrapped->profile_windows.empty());
    }
    if (step == 2) {
      EXPECT_EQ(wrapped->profile_windows, std::vector<bool>{true});
    }
  }
  EXPECT_EQ(wrapped->profile_windows, (std::vector<bool>{true, false}));
  EXPECT_GT(ops_in_window, 0) << "no op ran inside the window";
}

}  // namespace
}  // namespace nanovllm
