// Sampling through the whole engine: validation of every SamplingParams field, seeds (repeatable
// with one, different between engines without), stop_token_ids / min_tokens, n > 1 sharing the
// prompt's KV blocks, logprobs, batch independence with every processing field on, and stop
// strings over real detokenized text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/test_util.h"
#include "runtime/sampling_rng.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

std::map<int64_t, std::unique_ptr<Sequence>> run_all(LLMEngine& engine) {
  std::map<int64_t, std::unique_ptr<Sequence>> done;
  for (int i = 0; i < 10000 && !engine.is_finished(); ++i) {
    for (auto& s : engine.step().finished) done[s->seq_id] = std::move(s);
  }
  NV_CHECK(engine.is_finished(), "the engine did not finish");
  return done;
}

std::vector<int32_t> completion(const Sequence& s) {
  return {s.token_ids.begin() + s.num_prompt_tokens, s.token_ids.end()};
}

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + salt * 11 + 5) % 500));
  return p;
}

SamplingParams sampled(int max_tokens) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  return sp;
}

void expect_error(LLMEngine& engine, const SamplingParams& sp, const std::string& fragment) {
  try {
    engine.add_request({1, 2, 3}, sp);
    ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SamplingEngine, EveryFieldIsValidated) {
  std::string model = test::tiny_model("tiny");
  LLMEngine engine(test::tiny_config(model));
  const int vocab = test::vocab_size(model);
  const SamplingParams good = sampled(4);
  auto bad = [&](auto edit, const std::string& fragment) {
    SamplingParams sp = good;
    edit(sp);
    expect_error(engine, sp, fragment);
  };
  bad([](SamplingParams& s) { s.n = 0; }, "n must be in [1, 1024], got 0");
  bad([](SamplingParams& s) { s.n = 5000; }, "n must be");
  bad([](SamplingParams& s) { s.max_tokens = 0; }, "max_tokens must be >= 1, got 0");
  bad([](SamplingParams& s) { s.min_tokens = -1; }, "min_tokens must be >= 0, got -1");
  bad([](SamplingParams& s) { s.min_tokens = 5; }, "min_tokens must be <= max_tokens (4), got 5");
  bad([](SamplingParams& s) { s.temperature = -1.0f; }, "temperature must be");
  bad([](SamplingParams& s) { s.temperature = INFINITY; }, "temperature must be");
  bad([](SamplingParams& s) { s.top_p = 0.0f; }, "top_p must be in (0, 1], got 0");
  bad([](SamplingParams& s) { s.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5");
  bad([](SamplingParams& s) { s.top_k = -2; }, "top_k must be");
  bad([](SamplingParams& s) { s.min_p = -0.1f; }, "min_p must be in [0, 1], got -0.1");
  bad([](SamplingParams& s) { s.min_p = NAN; }, "min_p must be in [0, 1]");
  bad([](SamplingParams& s) { s.repetition_penalty = 0.0f; }, "repetition_penalty must be");
  bad([](SamplingParams& s) { s.repetition_penalty = NAN; }, "repetition_penalty must be");
  bad([](SamplingParams& s) { s.presence_penalty = 3.0f; }, "presence_penalty must be in [-2, 2], got 3");
  bad([](SamplingParams& s) { s.presence_penalty = NAN; }, "presence_penalty must be in [-2, 2]");
  bad([](SamplingParams& s) { s.frequency_penalty = -2.5f; }, "frequency_penalty must be in [-2, 2], got -2.5");
  bad([&](SamplingParams& s) { s.logit_bias[vocab] = 1.0f; }, "logit_bias: token id " + std::to_string(vocab));
  bad([](SamplingParams& s) { s.logit_bias[-1] = 1.0f; }, "logit_bias: token id -1");
  bad([](SamplingParams& s) { s.logit_bias[3] = NAN; }, "logit_bias: the bias of token 3");
  bad([&](SamplingParams& s) { s.stop_token_ids = {1, vocab + 2}; }, "stop_token_ids: token id");
  bad([](SamplingParams& s) { s.stop = {"ok", ""}; }, "stop: a stop string must not be empty");
  bad([](SamplingParams& s) { s.logprobs = 21; }, "logprobs must be in [0, 20], got 21");
  bad([](SamplingParams& s) { s.logprobs = -1; }, "logprobs must be in [0, 20], got -1");
  // Edges that are valid.
  SamplingParams ok = good;
  ok.temperature = 1e-40f;
  ok.presence_penalty = -2.0f;
  ok.frequency_penalty = 2.0f;
  ok.min_p = 1.0f;
  ok.logprobs = 20;
  ok.logit_bias[0] = 1e9f;  // clamped to 100
  ok.min_tokens = 4;
  EXPECT_NO_THROW(engine.add_request({1, 2}, ok));
  EXPECT_TRUE(engine.scheduler().num_waiting() == 1u);
  auto done = run_all(engine);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done.begin()->second->num_completion_tokens(), 4);
}

TEST(SamplingEngine, StopStringsNeedATokenizer) {
  LLM llm(test::tiny_config(test::tiny_model("tiny")));  // no tokenizer.json
  SamplingParams sp = sampled(4);
  sp.stop = {"x"};
  try {
    llm.generate({prompt_of(5, 0)}, {sp});
    ADD_FAILURE() << "stop strings without a tokenizer accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 0: stop strings need the model's tokenizer.json"),
              std::string::npos) << e.what();
  }
  EXPECT_TRUE(llm.engine().is_finished()) << "nothing was queued";
}

TEST(SamplingEngine, SeededRepeatsUnseededDiffersAcrossEngines) {
  std::string model = test::tiny_model("tiny");
  auto run = [&](std::optional<uint64_t> seed) {
    LLMEngine engine(test::tiny_config(model));
    SamplingParams sp = sampled(32);
    sp.seed = seed;
    engine.add_request(prompt_of(9, 1), sp);
    return completion(*run_all(engine).begin()->second);
  };
  EXPECT_EQ(run(1234), run(1234)) << "an explicit seed repeats across engines";
  // Three, not two: the tiny model's random weights make some paths likely enough that two
  // unseeded draws can agree by chance (cli_flags_test.cpp measured it on 12 tokens).
  const auto u1 = run(std::nullopt), u2 = run(std::nullopt), u3 = run(std::nullopt);
  EXPECT_TRUE(u1 != u2 || u2 != u3) << "without a seed three engines gave the same tokens";
}

TEST(SamplingEngine, StopTokenIdsAndMinTokens) {
  std::string model = test::tiny_model("tiny");
  LLMEngine engine(test::tiny_config(model));
  SamplingParams g;
  g.temperature = 0.0f;
  g.max_tokens = 24;
  g.ignore_eos = true;
  engine.add_request(prompt_of(7, 2), g);
  const std::vector<int32_t> base = completion(*run_all(engine).begin()->second);
  ASSERT_EQ(base.size(), 24u);

  // stop_token_ids: ends at the first occurrence, with "stop", the token kept (even with ignore_eos).
  SamplingParams st = g;
  st.stop_token_ids = {base[5]};
  engine.add_request(prompt_of(7, 2), st);
  auto s = run_all(engine);
  const std::vector<int32_t> got = completion(*s.begin()->second);
  const size_t first = size_t(std::find(base.begin(), base.end(), base[5]) - base.begin());
  EXPECT_EQ(got, std::vector<int32_t>(base.begin(), base.begin() + ptrdiff_t(first) + 1));
  EXPECT_EQ(s.begin()->second->finish_reason, FinishReason::STOP);

  // min_tokens: the stop token is masked until min_tokens tokens are out.
  SamplingParams mt = st;
  mt.stop_token_ids = {base[0]};
  mt.min_tokens = 6;
  engine.add_request(prompt_of(7, 2), mt);
  s = run_all(engine);
  const std::vector<int32_t> got2 = completion(*s.begin()->second);
  ASSERT_GE(got2.size(), 7u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(got2[i], base[0]) << "masked before min_tokens, token " << i;
  if (s.begin()->second->finish_reason == FinishReason::STOP) {
    EXPECT_EQ(got2.back(), base[0]);
  } else {
    EXPECT_EQ(got2.size(), 24u);
  }
  // The eos ids are masked too (the tiny model's eos list is non-empty).
  ASSERT_FALSE(engine.model_config().eos_token_ids.empty());
  SamplingParams eos = g;
  eos.ignore_eos = false;
  eos.min_tokens = 10;
  eos.logit_bias[engine.model_config().eos_token_ids[0]] = 100.0f;  // eos as soon as it may
  engine.add_request(prompt_of(7, 2), eos);
  s = run_all(engine);
  EXPECT_EQ(completion(*s.begin()->second).size(), 11u) << "10 tokens, then eos";
  EXPECT_EQ(s.begin()->second->finish_reason, FinishReason::STOP);
}

TEST(SamplingEngine, NSamplesShareThePromptBlocks) {
  std::string model = test::tiny_model("tiny");
  Config config = test::tiny_config(model);
  config.enable_prefix_caching = true;
  LLMEngine engine(config);
  SamplingParams sp = sampled(12);
  sp.seed = 77;
  sp.n = 4;
  const std::vector<int32_t> prompt = prompt_of(50, 3);  // 3 full blocks of 16 + 2 tokens
  const int64_t id = engine.add_request(prompt, sp);
  const int64_t hits_before = engine.scheduler().block_manager().num_prefix_hits();
  int max_shared = 0;
  std::map<int64_t, std::unique_ptr<Sequence>> done;
  while (!engine.is_finished()) {
    for (auto& s : engine.step().finished) done[s->seq_id] = std::move(s);
    const BlockManager& bm = engine.scheduler().block_manager();
    int shared = 0;
    for (int32_t b = 0; b < bm.num_blocks(); ++b) shared += bm.ref_count(b) == 4;
    max_shared = std::max(max_shared, shared);
  }
  EXPECT_EQ(max_shared, 3) << "the 3 full prompt blocks are held by all 4 samples at once";
  EXPECT_GE(engine.scheduler().block_manager().num_prefix_hits() - hits_before, 9)
      << "3 siblings x 3 blocks found in the prefix cache";
  ASSERT_EQ(done.size(), 4u);
  // Sample i equals a lone request with the seed of sample i.
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 4; ++i) {
    const Sequence& s = *done.at(id + i);
    EXPECT_EQ(s.request_id, id);
    EXPECT_EQ(s.sampling.sample_index, i);
    SamplingParams one = sampled(12);
    one.seed = sample_seed(77, i);
    engine.add_request(prompt, one);
    EXPECT_EQ(completion(s), completion(*run_all(engine).begin()->second)) << "sample " << i;
    distinct.insert(completion(s));
  }
  EXPECT_EQ(distinct.size(), 4u) << "the samples differ";
}

TEST(SamplingEngine, AbortingSampleZeroReleasesItsSiblings) {
  std::string model = test::tiny_model("tiny");
  LLMEngine engine(test::tiny_config(model));
  SamplingParams sp = sampled(5);
  sp.n = 3;
  const int64_t id = engine.add_request(prompt_of(20, 4), sp);
  EXPECT_TRUE(engine.abort(id));
  EXPECT_TRUE(engine.abort(id + 2)) << "a pending sibling can be aborted";
  auto done = run_all(engine);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done.begin()->first, id + 1);
  EXPECT_EQ(done.begin()->second->num_completion_tokens(), 5);
}

// A seeded request with every processing field on picks the same tokens alone and in a batch.
TEST(SamplingEngine, BatchIndependenceWithAllFields) {
  std::string model = test::tiny_model("tiny");
  LLMEngine engine(test::tiny_config(model));
  SamplingParams sp = sampled(16);
  sp.seed = 5;
  sp.top_k = 40;
  sp.top_p = 0.9f;
  sp.min_p = 0.01f;
  sp.repetition_penalty = 1.3f;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.4f;
  sp.logit_bias = {{3, 2.0f}, {9, -5.0f}};
  sp.min_tokens = 3;
  sp.stop_token_ids = {1};
  const std::vector<int32_t> prompt = prompt_of(21, 5);
  engine.add_request(prompt, sp);
  const std::vector<int32_t> alone = completion(*run_all(engine).begin()->second);
  int64_t id = -1;
  for (int k = 0; k < 6; ++k) {
    SamplingParams other = sampled(10 + k);
    other.seed = uint64_t(100 + k);
    other.repetition_penalty = 0.8f;
    engine.add_request(prompt_of(5 + 7 * k, k), other);
    if (k == 2) id = engine.add_request(prompt, sp);
  }
  auto done = run_all(engine);
  EXPECT_EQ(completion(*done.at(id)), alone);
}

TEST(SamplingEngine, GenerateNSamplesAndLogprobs) {
  std::string model = test::tiny_model("tiny");
  LLM llm(test::tiny_config(model));
  SamplingParams sp = sampled(10);
  sp.seed = 9;
  const std::vector<int32_t> prompt = prompt_of(40, 6);
  const GenerationOutput one = llm.generate({prompt}, {sp})[0];
  EXPECT_TRUE(one.samples.empty());
  sp.n = 3;
  const int64_t hits = llm.engine().scheduler().block_manager().num_prefix_hits();
  const GenerationOutput three = llm.generate({prompt}, {sp})[0];
  ASSERT_EQ(three.samples.size(), 3u);
  EXPECT_EQ(three.token_ids, one.token_ids) << "sample 0 equals the n == 1 output";
  EXPECT_EQ(three.samples[0].token_ids, one.token_ids);
  EXPECT_GE(llm.engine().scheduler().block_manager().num_prefix_hits() - hits, 2 * 2)
      << "siblings hit sample 0's 2 full prompt blocks";
  for (int k = 1; k < 3; ++k) {
    SamplingParams lone = sampled(10);
    lone.seed = sample_seed(9, k);
    EXPECT_EQ(three.samples[size_t(k)].token_ids, llm.generate({prompt}, {lone})[0].token_ids);
  }

  // Logprobs: one per token; greedy picks the top-1; logprobs sorted and <= 0.
  SamplingParams lp;
  lp.temperature = 0.0f;
  lp.max_tokens = 6;
  lp.ignore_eos = true;
  lp.logprobs = 5;
  const GenerationOutput g = llm.generate({prompt}, {lp})[0];
  ASSERT_EQ(g.logprobs.size(), g.token_ids.size());
  for (size_t t = 0; t < g.logprobs.size(); ++t) {
    const StepLogprobs& l = g.logprobs[t];
    EXPECT_EQ(l.sampled.token_id, g.token_ids[t]);
    ASSERT_EQ(l.top.size(), 5u);
    EXPECT_EQ(l.top[0].token_id, g.token_ids[t]);
    EXPECT_FLOAT_EQ(l.top[0].logprob, l.sampled.logprob);
    for (size_t j = 1; j < 5; ++j) EXPECT_LE(l.top[j].logprob, l.top[j - 1].logprob);
    EXPECT_LE(l.sampled.logprob, 0.0f);
  }
  lp.logprobs = 0;
  const GenerationOutput g0 = llm.generate({prompt}, {lp})[0];
  ASSERT_EQ(g0.logprobs.size(), 6u);
  EXPECT_TRUE(g0.logprobs[0].top.empty());
  EXPECT_EQ(g0.logprobs[0].sampled.logprob, g.logprobs[0].sampled.logprob);
  lp.logprobs.reset();
  EXPECT_TRUE(llm.generate({prompt}, {lp})[0].logprobs.empty());
}

// Stop strings on real text (Qwen3's tokenizer): a stop string spanning token boundaries ends the
// output before it, the stream never shows it or a part of it.
TEST(SamplingEngine, StopStringsOverDetokenizedText) {
  const std::string model = test::tiny_text_model();  // fails the test when the files are missing
  ASSERT_FALSE(model.empty());
  LLM llm(test::tiny_config(model));
  SamplingParams g;
  g.temperature = 0.0f;
  g.max_tokens = 40;
  g.ignore_eos = true;
  const std::string prompt = "The quick brown fox jumps over the lazy dog.";
  const GenerationOutput base = llm.generate(std::vector<std::string>{prompt}, {g})[0];
  ASSERT_GE(base.text.size(), 12u) << base.text;
  const Tokenizer& tokenizer = llm.engine().require_tokenizer();
  // A stop string spanning a token boundary: the end of token 2's text and the start of token 3's.
  std::vector<std::string> pieces;
  for (size_t t = 0; t < base.token_ids.size(); ++t) {
    pieces.push_back(tokenizer.decode({base.token_ids[t]}, true));
  }
  size_t k = 2;
  while (k + 1 < pieces.size() && (pieces[k].empty() || pieces[k + 1].empty())) ++k;
  ASSERT_LT(k + 1, pieces.size());
  std::string before;
  for (size_t t = 0; t < k; ++t) before += pieces[t];
  const std::string stop = pieces[k].substr(pieces[k].size() / 2) + pieces[k + 1].substr(0, (pieces[k + 1].size() + 1) / 2);
  const size_t at = base.text.find(stop);
  ASSERT_NE(at, std::string::npos);
  for (bool include : {false, true}) {
    SamplingParams sp = g;
    sp.stop = {"never-appears-xyz", stop};
    sp.include_stop_str_in_output = include;
    std::string streamed;
    std::vector<std::string> deltas;
    const GenerationOutput out = llm.generate(std::vector<std::string>{prompt}, {sp}, [&](size_t, const std::string& d) {
      streamed += d;
      deltas.push_back(d);
    })[0];
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_EQ(out.stop_reason, stop);
    EXPECT_EQ(out.text, base.text.substr(0, at + (include ? stop.size() : 0))) << "include " << include;
    EXPECT_EQ(streamed, out.text);
    EXPECT_EQ(out.token_ids.size(), k + 2) << "ends with the token that completed the match";
    EXPECT_EQ(std::vector<int32_t>(base.token_ids.begin(), base.token_ids.begin() + ptrdiff_t(out.token_ids.size())), out.token_ids);
    if (!include) {
      // No streamed prefix ends with a non-empty prefix of the stop string.
      std::string so_far;
      for (const std::string& d : deltas) {
        so_far += d;
        for (size_t len = 1; len <= stop.size() && len <= so_far.size(); ++len) {
          EXPECT_FALSE(so_far.compare(so_far.size() - len, len, stop, 0, len) == 0)
              << "streamed '" << so_far << "' shows part of '" << stop << "'";
        }
      }
    }
  }
  // skip_special_tokens, with logit_bias forcing Qwen3's <|im_end|> (151645).
  SamplingParams special = g;
  special.max_tokens = 2;
  special.logit_bias[151645] = 100.0f;
  special.skip_special_tokens = false;
  const GenerationOutput shown = llm.generate(std::vector<std::string>{prompt}, {special})[0];
  EXPECT_EQ(shown.token_ids, (std::vector<int32_t>{151645, 151645}));
  EXPECT_EQ(shown.text, "<|im_end|><|im_end|>");
  special.skip_special_tokens = true;
  EXPECT_EQ(llm.generate(std::vector<std::string>{prompt}, {special})[0].text, "");

  // min_tokens beyond the match: the stop string is not taken that early.
  SamplingParams late = g;
  late.stop = {stop};
  late.min_tokens = int(base.token_ids.size());
  late.max_tokens = int(base.token_ids.size());
  EXPECT_EQ(llm.generate(std::vector<std::string>{prompt}, {late})[0].finish_reason, "length");
}

}  // namespace
}  // namespace nanovllm
