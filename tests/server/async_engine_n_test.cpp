// AsyncLLMEngine with SamplingParams::n > 1: one request, one stream, n samples. The samples equal
// LLM::generate's (sample i seeded sample_seed(seed, i)), the siblings find sample 0's prompt
// blocks in the prefix cache, usage counts the prompt once, and aborting the request (or one
// sample) ends exactly what it should and frees every block.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "engine/async_llm_engine.h"
#include "nanovllm/llm.h"
#include "runtime/sampling_rng.h"
#include "server/server_fixture.h"

namespace nanovllm {
namespace {

using namespace std::chrono_literals;

struct SampleOut {
  std::vector<int32_t> token_ids;
  std::string text;
  std::string finish_reason;
  int num_finish_events = 0;
  int num_sample_tokens = 0;  // as the sample's final event says
};

struct RequestOut {
  std::map<int, SampleOut> samples;
  RequestEvent last;
  int num_final_events = 0;
  bool final_was_last = true;  // nothing came after the event with finished set
};

RequestOut drain(RequestStream& s) {
  RequestOut r;
  for (int i = 0; i < 100000; ++i) {
    std::optional<RequestEvent> e = s.next(10s);
    if (!e) {
      if (r.num_final_events == 0) ADD_FAILURE() << "no event within 10 s";
      break;
    }
    if (r.num_final_events > 0) r.final_was_last = false;
    SampleOut& o = r.samples[e->index];
    o.token_ids.insert(o.token_ids.end(), e->token_ids.begin(), e->token_ids.end());
    o.text += e->text;
    if (e->sample_finished()) {
      ++o.num_finish_events;
      o.finish_reason = e->finish_reason;
      o.num_sample_tokens = e->num_sample_tokens;
    }
    if (e->finished) {
      ++r.num_final_events;
      r.last = *e;
    }
  }
  return r;
}

std::vector<int32_t> prompt_of(int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(int32_t(100 + 7 * i));
  return p;
}

TEST(AsyncEngineN, SamplesMatchGenerateAndShareThePromptBlocks) {
  const std::string model = test::tiny_text_model();
  const std::vector<int32_t> prompt = prompt_of(40);  // 2 full blocks of 16, then 8 tokens
  SamplingParams p;
  p.n = 3;
  p.temperature = 0.9f;
  p.seed = 42;
  p.max_tokens = 14;
  p.ignore_eos = true;
  GenerationOutput want;
  {
    LLM llm(test::tiny_config(model));
    want = llm.generate({prompt}, {p})[0];
  }
  ASSERT_EQ(want.samples.size(), 3u);
  LLMEngine engine(test::tiny_config(model));  // prefix caching on (the default)
  ASSERT_TRUE(engine.config().enable_prefix_caching);
  const BlockManager& bm = engine.scheduler().block_manager();
  const int64_t hits_before = bm.num_prefix_hits();
  AsyncLLMEngine async(engine);
  auto stream = async.add_request(prompt, p);
  RequestOut got = drain(*stream);
  // The two siblings found sample 0's 2 full prompt blocks in the prefix cache.
  EXPECT_EQ(bm.num_prefix_hits() - hits_before, 2 * 2 * 16);
  ASSERT_EQ(got.samples.size(), 3u);
  int total = 0;
  for (int i = 0; i < 3; ++i) {
    const SampleOut& s = got.samples[i];
    EXPECT_EQ(s.token_ids, want.samples[size_t(i)].token_ids) << "sample " << i;
    EXPECT_EQ(s.text, want.samples[size_t(i)].text) << "sample " << i;
    EXPECT_EQ(s.num_finish_events, 1) << "sample " << i;
    EXPECT_EQ(s.finish_reason, "length") << "sample " << i;
    EXPECT_EQ(s.num_sample_tokens, 14) << "sample " << i;
    total += int(s.token_ids.size());
  }
  EXPECT_NE(got.samples[0].token_ids, got.samples[1].token_ids) << "the samples differ";
  // Sample 0 with seed 42 is the n == 1 request with seed 42; sample 2 the one with its seed.
  for (int i : {0, 2}) {
    SamplingParams one = p;
    one.n = 1;
    one.seed = sample_seed(42, i);
    RequestOut lone = drain(*async.add_request(prompt, one));
    EXPECT_EQ(lone.samples[0].token_ids, got.samples[i].token_ids) << "sample " << i;
  }
  EXPECT_EQ(got.num_final_events, 1);
  EXPECT_TRUE(got.final_was_last);
  EXPECT_EQ(got.last.num_prompt_tokens, 40) << "the prompt counts once";
  EXPECT_EQ(got.last.num_completion_tokens, total);
  EXPECT_EQ(total, 3 * 14);
  EngineMetrics m = async.metrics();
  EXPECT_GT(m.prefix_cache_hits, 0);
  EXPECT_EQ(m.prompt_tokens_total, 40 * 3) << "once for the n = 3 request, once per lone one";
  EXPECT_EQ(m.generation_tokens_total, 5 * 14);
  EXPECT_EQ(m.time_to_first_token_seconds.count, 3u);
  EXPECT_EQ(m.e2e_request_latency_seconds.count, 3u);
  EXPECT_EQ(m.request_success_total["length"], 5) << "counted per sample";
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  EXPECT_EQ(async.num_unfinished(), 0);
}

TEST(AsyncEngineN, PrefixHitsOfTheSiblingsAlone) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  const BlockManager& bm = engine.scheduler().block_manager();
  AsyncLLMEngine async(engine);
  SamplingParams p;
  p.n = 4;
  p.max_tokens = 3;
  p.ignore_eos = true;
  const int64_t hits_before = bm.num_prefix_hits(), queries_before = bm.num_prefix_queries();
  RequestOut got = drain(*async.add_request(prompt_of(50), p));  // 3 full blocks
  ASSERT_EQ(got.samples.size(), 4u);
  EXPECT_EQ(bm.num_prefix_hits() - hits_before, 3 * 3 * 16) << "3 siblings x 3 full blocks";
  EXPECT_EQ(bm.num_prefix_queries() - queries_before, 4 * 50);
  EXPECT_EQ(async.metrics().prefix_cache_hits, bm.num_prefix_hits());
}

SamplingParams long_running(int n) {
  SamplingParams p;
  p.n = n;
  p.ignore_eos = true;
  p.max_tokens = 400;
  return p;
}

TEST(AsyncEngineN, AbortEndsEverySampleAndFreesAllBlocks) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  const BlockManager& bm = engine.scheduler().block_manager();
  const int free_at_start = bm.num_free_blocks();
  AsyncLLMEngine async(engine);
  auto s = async.add_request(prompt_of(40), long_running(3));
  std::optional<RequestEvent> first = s->next(10s);  // sample 0's first token: siblings admitted
  ASSERT_TRUE(first && !first->token_ids.empty());
  // Wait until every sample has produced a token, so that all three hold blocks.
  RequestOut got;
  got.samples[first->index].token_ids = first->token_ids;
  for (int i = 0; i < 1000 && got.samples.size() < 3; ++i) {
    std::optional<RequestEvent> e = s->next(10s);
    ASSERT_TRUE(e);
    got.samples[e->index].token_ids.insert(got.samples[e->index].token_ids.end(), e->token_ids.begin(),
                                           e->token_ids.end());
  }
  ASSERT_EQ(got.samples.size(), 3u);
  EXPECT_LT(bm.num_free_blocks(), free_at_start);
  async.abort(s->request_id());
  RequestOut rest = drain(*s);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rest.samples[i].finish_reason, "abort") << i;
    EXPECT_EQ(rest.samples[i].num_finish_events, 1) << i;
    EXPECT_LT(rest.samples[i].num_sample_tokens, 400) << i;
  }
  EXPECT_EQ(rest.num_final_events, 1);
  EXPECT_TRUE(rest.final_was_last);
  EXPECT_EQ(bm.num_free_blocks(), free_at_start);
  EngineMetrics m = async.metrics();
  EXPECT_EQ(m.num_free_kv_blocks, m.num_kv_blocks);
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.request_success_total["abort"], 3);
  EXPECT_EQ(async.num_unfinished(), 0);
}

TEST(AsyncEngineN, AbortBeforeTheSiblingsRanDropsThem) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  const BlockManager& bm = engine.scheduler().block_manager();
  const int free_at_start = bm.num_free_blocks();
  {
    AsyncLLMEngine async(engine);
    // Handed over and aborted at once: the abort lands before or after the first step (either
    // way the siblings are pending or just admitted), and every sample ends with "abort".
    auto s = async.add_request(prompt_of(40), long_running(5));
    async.abort(s->request_id());
    RequestOut got = drain(*s);
    ASSERT_EQ(got.samples.size(), 5u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(got.samples[i].finish_reason, "abort") << i;
    EXPECT_EQ(got.num_final_events, 1);
    EXPECT_EQ(bm.num_free_blocks(), free_at_start);
    EXPECT_EQ(async.num_unfinished(), 0);
  }
  EXPECT_TRUE(engine.is_finished()) << "no sibling left pending in the LLMEngine";
}

TEST(AsyncEngineN, AbortSampleEndsThatSampleOnly) {
  LLMEngine engine(test::tiny_config(test::tiny_text_model()));
  const BlockManager& bm = engine.scheduler().block_manager();
  AsyncLLMEngine async(engine);
  SamplingParams p = long_running(3);
  p.max_tokens = 60;
  auto s = async.add_request(prompt_of(20), p);
  ASSERT_TRUE(s->next(10s));
  async.abort_sample(s->request_id(), 1);
  async.abort_sample(s->request_id(), 7);  // no such sample: ignored
  RequestOut got = drain(*s);
  EXPECT_EQ(got.samples[0].finish_reason, "length");
  EXPECT_EQ(got.samples[1].finish_reason, "abort");
  EXPECT_EQ(got.samples[2].finish_reason, "length");
  EXPECT_EQ(got.samples[2].num_sample_tokens, 60);
  EXPECT_LT(got.samples[1].num_sample_tokens, 60);
  EXPECT_EQ(got.num_final_events, 1);
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
}

}  // namespace
}  // namespace nanovllm
