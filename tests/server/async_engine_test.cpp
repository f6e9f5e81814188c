// The streaming engine API: events add up to LLM::generate's outputs, abort frees blocks at the
// next step boundary from any thread, a slow reader never stalls other requests; a request with
// n samples is one stream whose samples share the prompt's blocks (async_engine_n_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "engine/async_llm_engine.h"
#include "nanovllm/llm.h"
#include "server/server_fixture.h"

namespace nanovllm {
namespace {

using namespace std::chrono_literals;

struct Collected {
  std::vector<int32_t> token_ids;
  std::string text;
  RequestEvent last;
  int num_events = 0;
};

Collected drain(RequestStream& s) {
  Collected c;
  for (int i = 0; i < 10000; ++i) {
    std::optional<RequestEvent> e = s.next(10s);
    if (!e) {
      ADD_FAILURE() << "no event within 10 s";
      break;
    }
    ++c.num_events;
    c.token_ids.insert(c.token_ids.end(), e->token_ids.begin(), e->token_ids.end());
    c.text += e->text;
    if (e->finished) {
      c.last = *e;
      break;
    }
  }
  return c;
}

std::vector<std::vector<int32_t>> prompts() {
  return {{1, 2, 3, 4, 5}, {7, 8, 9}, {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28}};
}

TEST(AsyncEngine, StreamsAddUpToGenerate) {
  const std::string model = test::tiny_text_model();
  std::vector<SamplingParams> params(3);
  params[0].temperature = 0.0f;
  params[0].max_tokens = 12;
  params[1].temperature = 0.8f;
  params[1].seed = 42;
  params[1].max_tokens = 20;
  params[2].temperature = 1.0f;
  params[2].seed = 7;
  params[2].max_tokens = 9;
  params[2].ignore_eos = true;
  std::vector<GenerationOutput> want;
  {
    LLM llm(test::tiny_config(model));
    want = llm.generate(prompts(), params);
  }
  LLMEngine engine(test::tiny_config(model));
  AsyncLLMEngine async(engine);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < 3; ++i) streams.push_back(async.add_request(prompts()[i], params[i]));
  for (size_t i = 0; i < 3; ++i) {
    Collected c = drain(*streams[i]);
    EXPECT_EQ(c.token_ids, want[i].token_ids) << i;
    EXPECT_EQ(c.text, want[i].text) << i;
    EXPECT_TRUE(c.last.finished);
    EXPECT_EQ(c.last.finish_reason, want[i].finish_reason) << i;
    EXPECT_EQ(c.last.num_prompt_tokens, int(prompts()[i].size()));
    EXPECT_EQ(c.last.num_completion_tokens, int(want[i].token_ids.size()));
    EXPECT_EQ(streams[i]->next(10ms), std::nullopt) << "nothing follows the final event";
  }
  EXPECT_EQ(async.num_unfinished(), 0);
  EngineMetrics m = async.metrics();
  int64_t generated = 0;
  for (const auto& w : want) generated += int64_t(w.token_ids.size());
  EXPECT_EQ(m.generation_tokens_total, generated);
  EXPECT_EQ(m.prompt_tokens_total, 5 + 3 + 18);
  EXPECT_EQ(m.time_to_first_token_seconds.count, 3u);
  EXPECT_EQ(m.e2e_request_latency_seconds.count, 3u);
  EXPECT_EQ(m.num_free_kv_blocks, m.num_kv_blocks);
}

TEST(AsyncEngine, InvalidRequestThrowsAndQueuesNothing) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  AsyncLLMEngine async(engine);
  SamplingParams p;
  EXPECT_THROW(async.add_request({}, p), Error);
  p.max_tokens = 0;
  EXPECT_THROW(async.add_request({1, 2}, p), Error);
  EXPECT_EQ(async.num_unfinished(), 0);
}

TEST(AsyncEngine, AbortFromAnotherThreadFreesBlocks) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  AsyncLLMEngine async(engine);
  SamplingParams p;
  p.ignore_eos = true;
  p.max_tokens = 400;
  std::vector<int32_t> prompt(40, 5);
  auto a = async.add_request(prompt, p);
  auto b = async.add_request(prompt, p);
  std::optional<RequestEvent> first = a->next(10s);
  ASSERT_TRUE(first && !first->token_ids.empty());
  std::thread t([&] { async.abort(a->request_id()); });
  t.join();
  Collected c = drain(*a);
  EXPECT_EQ(c.last.finish_reason, "abort");
  EXPECT_LT(int(first->token_ids.size() + c.token_ids.size()), 400);
  async.abort(b->request_id());
  EXPECT_EQ(drain(*b).last.finish_reason, "abort");
  EngineMetrics m = async.metrics();  // gauges are updated before the final events
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.num_requests_waiting, 0);
  EXPECT_EQ(m.num_free_kv_blocks, m.num_kv_blocks);
  EXPECT_EQ(m.request_success_total["abort"], 2);
  EXPECT_EQ(engine.scheduler().block_manager().num_free_blocks(),
            engine.scheduler().block_manager().num_blocks());
  // The engine keeps serving after aborts.
  SamplingParams q;
  q.max_tokens = 3;
  q.ignore_eos = true;
  EXPECT_EQ(drain(*async.add_request({1, 2, 3}, q)).token_ids.size(), 3u);
}

TEST(AsyncEngine, SlowReaderDoesNotStallOthers) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  AsyncLLMEngine async(engine);
  SamplingParams p;
  p.ignore_eos = true;
  p.max_tokens = 30;
  auto slow = async.add_request({1, 2, 3}, p);  // never read until the other finished
  auto fast = async.add_request({4, 5, 6}, p);
  Collected f = drain(*fast);
  EXPECT_EQ(f.token_ids.size(), 30u);
  // The slow stream's events were merged while unread: all 30 tokens in few events.
  Collected s = drain(*slow);
  EXPECT_EQ(s.token_ids.size(), 30u);
  EXPECT_LE(s.num_events, 3);
  EXPECT_EQ(s.last.finish_reason, "length");
}

TEST(AsyncEngine, NotifyFiresForEveryNewBatchOfEvents) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  AsyncLLMEngine async(engine);
  SamplingParams p;
  p.ignore_eos = true;
  p.max_tokens = 10;
  std::atomic<int> notified{0};
  auto s = async.add_request({1, 2, 3}, p);
  s->set_notify([&] { ++notified; });
  Collected c = drain(*s);
  async.shutdown();  // the notify of the final event may still run: join before `notified` goes
  EXPECT_EQ(c.token_ids.size(), 10u);
  EXPECT_GE(notified.load(), 1);
}

// A step's notifies run after every event of the step is queued: a reader of many streams that
// is woken by the first finds all of them (one wake-up a step, not one a stream).
TEST(AsyncEngine, AStepNotifiesAfterQueueingAllItsEvents) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  AsyncLLMEngine async(engine);
  SamplingParams p;
  p.ignore_eos = true;
  p.max_tokens = 24;
  const int n = 8;
  std::vector<std::vector<int32_t>> ps(n, std::vector<int32_t>{1, 2, 3});
  std::vector<std::shared_ptr<RequestStream>> streams = async.add_requests(ps, {p});
  std::mutex mu;                      // the readers' state
  std::vector<int> drained_per_wake;  // how many streams had events, per notify that found any
  std::vector<int> tokens(n, 0);
  std::vector<bool> ended(n, false);
  auto drain_all = [&] {  // under mu
    int with_events = 0;
    for (int i = 0; i < n; ++i) {
      bool any = false;
      while (std::optional<RequestEvent> e = streams[size_t(i)]->try_next()) {
        any = true;
        tokens[size_t(i)] += int(e->token_ids.size());
        ended[size_t(i)] = ended[size_t(i)] || e->finished;
      }
      with_events += any;
    }
    return with_events;
  };
  for (auto& s : streams) {
    s->set_notify([&] {
      std::lock_guard lock(mu);
      if (int k = drain_all(); k > 0) drained_per_wake.push_back(k);
    });
  }
  {  // Events queued before the notifies were set notify nobody: read them (RequestStream's rule).
    std::lock_guard lock(mu);
    drain_all();
  }
  for (int i = 0; i < 1000 && !std::all_of(streams.begin(), streams.end(),
                                           [](const auto& s) { return s->finished(); });
       ++i) {
    std::this_thread::sleep_for(10ms);
  }
  // Joined before the notifies' captures (declared after `async`) go: the last step's notifies
  // may still be running.
  async.shutdown();
  std::lock_guard lock(mu);
  drain_all();  // left by a step whose pushes the read above split
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(tokens[size_t(i)], 24) << "stream " << i;
    EXPECT_TRUE(ended[size_t(i)]) << "stream " << i;
  }
  // The 8 requests run in lockstep (same prompt, same length): a wake finds all 8, but for one
  // that the read above may have split (it can run between two pushes of a step).
  ASSERT_GE(drained_per_wake.size(), 10u);  // notifies set before most of the 24 steps
  const auto whole = std::count(drained_per_wake.begin(), drained_per_wake.end(), n);
  EXPECT_GE(whole + 1, std::ptrdiff_t(drained_per_wake.size()));
}

TEST(AsyncEngine, ShutdownAbortsWhatRuns) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  std::shared_ptr<RequestStream> s;
  {
    AsyncLLMEngine async(engine);
    SamplingParams p;
    p.ignore_eos = true;
    p.max_tokens = 400;
    s = async.add_request({1, 2, 3}, p);
    ASSERT_TRUE(s->next(10s));
    async.shutdown();
    EXPECT_THROW(async.add_request({1, 2, 3}, p), Error);
  }
  EXPECT_EQ(drain(*s).last.finish_reason, "abort");
  EXPECT_TRUE(engine.is_finished());
}

}  // namespace
}  // namespace nanovllm
