// Structured outputs through the whole engine (SamplingParams::structured_outputs, the grammar
// engine of src/structured wired into the sampler): on a random-weight model whose logits favour
// nothing, every constrained output of many seeds -- greedy and sampled, n > 1, sharing batches
// with free requests -- is valid: JSON parsed and validated by python3-jsonschema, regexes by
// Python's re.fullmatch, choices exact (tests/structured/check_outputs.py); grammars end with
// "stop". Constraining some requests changes no output of the free ones; preemption and the
// prefix cache change no constrained greedy output; bad specs are Errors naming what was wrong.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "model/make_model.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/test_util.h"
#include "structured/check_outputs.h"
#include "util/check.h"

namespace nanovllm {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

Config config() {
  Config c = test::tiny_config(test::tiny_text_model());
  c.kv_cache_memory = 8 << 20;
  return c;
}

const char* const kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 12},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
  "address": {"$ref": "#/$defs/address"}},
  "required": ["name", "age"],
  "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                                         "zip": {"type": "string", "pattern": "[0-9]{5}"}},
                        "required": ["zip"]}}})";
const char* const kRegex = R"R(\d{3}-[a-z]{2,6}(\.[a-z]{2,3})?)R";
const char* const kGrammar = R"G(root ::= "(" expr ")"
expr ::= term (("+" | "*") term){0,3}
term ::= [0-9]{1,3} | "x")G";

struct Case {
  const char* kind;  // check_outputs.py's: json_schema, json_object, regex; or choice, gbnf
  StructuredOutputsParams params;
  std::string spec;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  StructuredOutputsParams p;
  p.json = kSchema;
  v.push_back({"json_schema", p, kSchema});
  p = {};
  p.regex = kRegex;
  v.push_back({"regex", p, kRegex});
  p = {};
  p.choice = std::vector<std::string>{"yes", "no", "maybe not", "\xe6\x98\xaf"};  // 是
  v.push_back({"choice", p, ""});
  p = {};
  p.grammar = kGrammar;
  v.push_back({"gbnf", p, "\\((\\d{1,3}|x)([+*](\\d{1,3}|x)){0,3}\\)"});  // the same language
  return v;
}


TEST(StructuredEngine, EveryOutputIsValidGreedySampledAndShared) {
  LLM llm(config());
  const int vocab = test::vocab_size(llm.engine().config().model);
  const Prompts prompts = test::random_prompts(6, std::min(vocab, 150000), 3, 30, 5);
  std::vector<nlohmann::json> lines;
  int id = 0, choices = 0;
  for (const Case& c : cases()) {
    // Each prompt twice constrained (greedy, and sampled with n = 2) and once free, in one batch.
    Prompts batch;
    std::vector<SamplingParams> params;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams greedy;
      greedy.temperature = 0.0f;
      greedy.max_tokens = 160;
      greedy.structured_outputs = c.params;
      SamplingParams sampled = greedy;
      sampled.temperature = 1.0f;
      sampled.seed = 100 + i;
      sampled.n = 2;
      SamplingParams free;
      free.temperature = 0.0f;
      free.max_tokens = 8;
      for (const SamplingParams& sp : {greedy, sampled, free}) {
        batch.push_back(prompts[i]);
        params.push_back(sp);
      }
    }
    const std::vector<GenerationOutput> outs = llm.generate(batch, params);
    ASSERT_EQ(outs.size(), batch.size());
    std::printf("%s, greedy: %s\n%s, sampled: %s\n", c.kind, outs[0].text.c_str(), c.kind,
                outs[1].samples.empty() ? "" : outs[1].samples[1].text.c_str());
    for (size_t r = 0; r < batch.size(); ++r) {
      if (!params[r].structured_outputs) continue;
      std::vector<GenerationOutput> samples = outs[r].samples;
      if (samples.empty()) samples.push_back(outs[r]);
      ASSERT_EQ(int(samples.size()), params[r].n);
      for (const GenerationOutput& o : samples) {
        EXPECT_EQ(o.finish_reason, "stop") << c.kind << " request " << r << ": " << o.error << " text " << o.text;
        if (std::string(c.kind) == "choice") {
          const auto& ch = *c.params.choice;
          EXPECT_NE(std::find(ch.begin(), ch.end(), o.text), ch.end()) << o.text;
          ++choices;
          continue;
        }
        const std::string kind = std::string(c.kind) == "gbnf" ? "regex" : c.kind;
        lines.push_back({{"id", id++}, {"kind", kind}, {"spec", c.spec}, {"output", o.text}});
      }
    }
  }
  test::check_with_python(lines);
  std::printf("%zu constrained outputs checked by python, %d choices checked here\n", lines.size(), choices);
}

TEST(StructuredEngine, FreeRequestsUnchangedAndFeaturesChangeNoOutput) {
  const Prompts prompts = test::random_prompts(5, 150000, 20, 60, 9);
  SamplingParams free;
  free.temperature = 0.0f;
  free.max_tokens = 24;
  free.ignore_eos = true;
  SamplingParams constrained = free;
  constrained.ignore_eos = false;
  constrained.max_tokens = 160;
  constrained.structured_outputs = StructuredOutputsParams{};
  constrained.structured_outputs->json = kSchema;
  auto run = [&](const Config& c, bool mix) {
    LLM llm(c);
    Prompts batch;
    std::vector<SamplingParams> params;
    for (const auto& p : prompts) {
      batch.push_back(p);
      params.push_back(free);
      if (mix) {
        batch.push_back(p);
        params.push_back(constrained);
      }
    }
    std::vector<std::vector<int32_t>> ids;
    for (const GenerationOutput& o : llm.generate(batch, params)) ids.push_back(o.token_ids);
    return ids;
  };
  const Config base = config();
  const auto alone = run(base, false);
  const auto mixed = run(base, true);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(mixed[2 * i], alone[i]) << "free request " << i << " changed beside constrained ones";
  Config no_cache = base;
  no_cache.enable_prefix_caching = false;
  EXPECT_EQ(run(no_cache, true), mixed) << "prefix caching";
  Config small = base;
  small.kv_cache_memory = 10 * test::kv_block_bytes(base.model, base.block_size);  // preempts
  small.max_model_len = 10 * base.block_size;
  EXPECT_EQ(run(small, true), mixed) << "preemption";
  Config chunked = base;
  chunked.max_num_batched_tokens = 32;
  EXPECT_EQ(run(chunked, true), mixed) << "chunked prefill";
}

// A grammar too ambiguous for the matcher's run-time limit compiles, then hits max_parse_stacks
// mid-generation: after n "a"s each open "a" may still be closed by a "b" or a "c", 2^n distinct
// parse stacks (logit_bias makes greedy pick "a"; the mask after it walks Qwen3's long runs of
// "a" in one token, which pass the limit of 1000). Only that request ends, with finish_reason
// "error" naming the limit; the free requests in its batch give the tokens they give alone, and
// the engine serves the next batch.
TEST(StructuredEngine, AGrammarLimitHitMidGenerationEndsOnlyItsRequest) {
  LLM llm(config());
  const std::vector<int32_t> a = llm.engine().require_tokenizer().encode("a", false);
  ASSERT_EQ(a.size(), 1u);
  const Prompts prompts = test::random_prompts(3, 150000, 10, 30, 4);
  SamplingParams free;
  free.temperature = 0.0f;
  free.max_tokens = 20;
  free.ignore_eos = true;
  SamplingParams ambiguous = free;
  ambiguous.max_tokens = 40;
  ambiguous.logit_bias = {{a[0], 100.0f}};
  ambiguous.structured_outputs = StructuredOutputsParams{};
  ambiguous.structured_outputs->grammar = "root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"a\"";
  std::vector<GenerationOutput> alone = llm.generate(prompts, std::vector<SamplingParams>(3, free));
  Prompts batch = prompts;
  batch.push_back(prompts[0]);
  std::vector<SamplingParams> params(3, free);
  params.push_back(ambiguous);
  std::vector<GenerationOutput> mixed = llm.generate(batch, params);
  ASSERT_EQ(mixed.size(), 4u);
  EXPECT_EQ(mixed[3].finish_reason, "error") << mixed[3].text;
  EXPECT_NE(mixed[3].error.find("max_parse_stacks"), std::string::npos) << mixed[3].error;
  EXPECT_GE(mixed[3].token_ids.size(), 1u) << "the limit hit before generation started";
  EXPECT_LT(mixed[3].token_ids.size(), 40u);
  for (int32_t t : mixed[3].token_ids) EXPECT_EQ(t, a[0]);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(mixed[i].finish_reason, "length");
    EXPECT_EQ(mixed[i].token_ids, alone[i].token_ids) << "free request " << i;
  }
  EXPECT_EQ(llm.generate(prompts, std::vector<SamplingParams>(3, free))[1].token_ids, alone[1].token_ids);
}

void expect_add_error(LLMEngine& engine, const SamplingParams& sp, const std::string& part) {
  try {
    engine.add_request({1, 2, 3}, sp);
    ADD_FAILURE() << "accepted; wanted an error with: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(StructuredEngine, BadSpecsAreErrorsNamingWhatWasWrong) {
  LLMEngine engine(config());
  SamplingParams sp;
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->json = R"({"type": "object", "properties": {"a": {"type": "string", "format": "hostname"}}})";
  expect_add_error(engine, sp, "hostname");
  sp.structured_outputs->json = R"({"type": "array", "uniqueItems": true})";
  expect_add_error(engine, sp, "uniqueItems");
  sp.structured_outputs->json = "{not json";
  expect_add_error(engine, sp, "JSON");
  sp.structured_outputs->regex = "a+";
  expect_add_error(engine, sp, "set exactly one");
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->regex = "(a";
  expect_add_error(engine, sp, "regex");
  sp.structured_outputs->regex = R"((a)\1)";
  expect_add_error(engine, sp, "backreference");
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->grammar = "root ::= missing";
  expect_add_error(engine, sp, "missing");
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->choice = std::vector<std::string>{};
  expect_add_error(engine, sp, "choice");
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->json_object = true;
  sp.min_tokens = 3;
  expect_add_error(engine, sp, "min_tokens");
  // The engine keeps serving.
  SamplingParams ok;
  ok.structured_outputs = StructuredOutputsParams{};
  ok.structured_outputs->choice = std::vector<std::string>{"x", "y"};
  ok.temperature = 0.0f;
  const int64_t id = engine.add_request({1, 2, 3}, ok);
  bool done = false;
  while (!done) {
    for (const auto& seq : engine.step().finished) {
      if (seq->seq_id != id) continue;
      done = true;
      EXPECT_EQ(seq->finish_reason, FinishReason::STOP) << seq->error;
    }
  }
}

}  // namespace
}  // namespace nanovllm
