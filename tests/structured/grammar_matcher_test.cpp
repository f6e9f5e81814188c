// GrammarMatcher on small vocabularies: masks equal the naive definition (a token is allowed
// iff the byte-level parser takes its bytes one by one) along random walks; tokens that span
// several terminals or end inside a UTF-8 code point; EOS; padding and byte-less ids; copies;
// the runtime limits; GrammarCache.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "structured/grammar_cache.h"
#include "structured/structured_test_util.h"

namespace nanovllm::structured {
namespace {

using test::gbnf;
using test::regex;
using test::schema;

#define EXPECT_ERROR_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// The 256 bytes, multi-byte tokens (JSON punctuation runs, words, UTF-8 pieces that start or
// end inside a code point), an id with no bytes, two EOS ids, and padding up to 400.
std::shared_ptr<const TokenVocabulary> mixed_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
  for (const char* s : {"{\"",      "\":",      "\": ",     "\"},{\"", "\", \"",   "[1,",
                        "2]}",      "true",     "null",     "false",   "\"}",      "},",
                        "]}",       "[[",       "]]",       "{\"a\":", "\xC3\xA9", "\xC3\xA9t\xC3",
                        "\xA9\xE2", "\x82\xAC", "\xE2\x82", "ab",      "abc",      "12",
                        "345",      ".5",       "e+",       "\\n",     "\\u00",    "\\\"",
                        " (",       ") ",       "* ",       "+ ",      "-1",       "aaaa",
                        "bb",       "\n  ",     "  ",       "\t"}) {
    t.push_back(s);
  }
  t.push_back("");  // an id whose bytes are unknown: never allowed
  const int32_t eos_a = int32_t(t.size()), eos_b = eos_a + 1;
  t.push_back("<eos>");  // EOS ids' bytes are ignored
  t.push_back("");
  return std::make_shared<const TokenVocabulary>(t, 400, std::vector<int32_t>{eos_a, eos_b});
}

int32_t id_of_aaaa(const std::shared_ptr<const TokenVocabulary>& v) {
  for (int32_t t = 0; t < v->vocab_size(); ++t) {
    if (v->token_bytes(t) == "aaaa") return t;
  }
  return -1;
}

bool bit(const std::vector<uint32_t>& mask, int32_t t) {
  return (mask[size_t(t) / 32] >> (t % 32)) & 1;
}

// Walks `walks` random sequences (uniform over allowed tokens, EOS with probability 0.3 where
// allowed), checking every mask against the naive definition and that a refused token leaves the
// state alone.
void check_walks(const std::shared_ptr<const CompiledGrammar>& g,
                 const std::shared_ptr<const TokenVocabulary>& v, int walks, int max_steps,
                 unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(size_t(v->num_bitmask_words())), again(mask.size());
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g, v);
    for (int step = 0; step < max_steps && !m.is_terminated(); ++step) {
      const int n = m.fill_next_token_bitmask(mask.data());
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < v->vocab_size(); ++t) {
        const bool naive =
            v->is_eos(t) ? m.can_end()
                         : !v->token_bytes(t).empty() && m.can_accept_bytes(v->token_bytes(t));
        ASSERT_EQ(bit(mask, t), naive) << "walk " << w << " step " << step << " token " << t << " '"
                                       << v->token_bytes(t) << "'";
        if (naive) allowed.push_back(t);
      }
      ASSERT_EQ(n, int(allowed.size()));
      ASSERT_GT(n, 0) << "a live state always allows something (a token or EOS)";
      // A refused token changes nothing.
      const int32_t refused = int32_t(rng() % uint32_t(v->vocab_size()));
      if (!bit(mask, refused)) {
        ASSERT_FALSE(m.accept_token(refused));
        ASSERT_EQ(m.fill_next_token_bitmask(again.data()), n);
        ASSERT_EQ(again, mask);
      }
      int32_t t = allowed[rng() % allowed.size()];
      if (m.can_end() && std::uniform_real_distribution<double>(0, 1)(rng) < 0.3)
        t = v->eos_ids()[0];
      ASSERT_TRUE(m.accept_token(t));
    }
  }
}

TEST(GrammarMatcher, MasksEqualTheNaiveDefinition) {
  const auto v = mixed_vocab();
  check_walks(
      schema(
          R"js({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
      "b": {"type": "string", "maxLength": 4}, "c": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}},
      "required": ["a"]})js"),
      v, 30, 60, 1);
  check_walks(compile_grammar({GrammarSpec::Kind::kJsonObject, "", {}}), v, 30, 60, 2);
  check_walks(regex("(ab|\xC3\xA9t)+[0-9]{1,3}\xE2\x82\xAC?"), v, 30, 40, 3);
  check_walks(gbnf(R"g(root ::= expr
expr ::= term (("+ " | "* ") term)*
term ::= [0-9]+ | "(" expr ")" | " (" expr ") "
)g"),
              v, 30, 60, 4);
  check_walks(test::choice({"true", "truest", "null", "\xC3\xA9t\xC3\xA9"}), v, 20, 10, 5);
}

TEST(GrammarMatcher, MasksEqualTheNaiveDefinitionNearTheDepthLimit) {
  GrammarLimits shallow;
  shallow.max_stack_depth = 12;
  check_walks(compile_grammar({GrammarSpec::Kind::kJsonObject, "", {}}, shallow), mixed_vocab(), 40,
              80, 6);
  check_walks(gbnf(R"g(root ::= "(" root ")" | "[" root "]" | "")g", shallow), mixed_vocab(), 40,
              40, 7);
  // The limit refuses deeper nesting, consistently with the mask.
  GrammarMatcher m(gbnf(R"g(root ::= "(" root ")" | "x")g", shallow), test::byte_vocab());
  int depth = 0;
  while (m.accept_bytes("(")) ++depth;
  EXPECT_GT(depth, 3);
  EXPECT_LE(depth, 12);
  EXPECT_TRUE(m.accept_bytes("x" + std::string(size_t(depth), ')')));
  EXPECT_TRUE(m.can_end());
  // No dead end at the limit: a stack is kept only if it can be finished within it (here "<("
  // needs two more frames to finish than "<" alone).
  for (uint32_t limit = 3; limit < 20; ++limit) {
    GrammarLimits l;
    l.max_stack_depth = limit;
    GrammarMatcher deep(gbnf(R"g(root ::= "<" ( "(" root ")" | "x" ) ">")g", l),
                        test::byte_vocab());
    while (deep.accept_bytes("<") && deep.accept_bytes("(")) {
    }
    std::vector<uint32_t> mask(size_t(test::byte_vocab()->num_bitmask_words()));
    EXPECT_GT(deep.fill_next_token_bitmask(mask.data()), 0) << "limit " << limit;
  }
  GrammarLimits tiny;
  tiny.max_stack_depth = 2;
  EXPECT_ERROR_HAS(test::gbnf_error(R"g(root ::= "(" a ")"
a ::= "[" b "]"
b ::= "x")g",
                                    tiny),
                   "max_stack_depth");
}

TEST(GrammarMatcher, TokensSpanningTerminalsAndCodePoints) {
  const auto v = mixed_vocab();
  auto id = [&](std::string_view bytes) {
    for (int32_t t = 256; t < v->vocab_size(); ++t) {
      if (v->token_bytes(t) == bytes) return t;
    }
    return int32_t(uint8_t(bytes[0]));  // a single byte
  };
  GrammarMatcher m(
      schema(
          R"js({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                              "b": {"type": "string"}}})js"),
      v);
  for (const char* piece : {"{\"a\":", "[1,", "2", "]", ",", "\"", "b", "\":", "\"",
                            "\xC3\xA9t\xC3", "\xA9\xE2", "\x82\xAC", "\"}"}) {
    ASSERT_TRUE(m.accept_token(id(piece))) << piece;
  }
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.is_terminated());  // an object is complete: nothing may follow but EOS
  std::vector<uint32_t> mask(size_t(v->num_bitmask_words()));
  EXPECT_EQ(m.fill_next_token_bitmask(mask.data()), 2);  // the two EOS ids
  EXPECT_TRUE(m.accept_token(v->eos_ids()[1]));
  EXPECT_EQ(m.fill_next_token_bitmask(mask.data()), 0);
  EXPECT_FALSE(m.accept_token(v->eos_ids()[0]));
  EXPECT_FALSE(m.can_end());
}

TEST(GrammarMatcher, EosPaddingAndBytelessIds) {
  const auto v = mixed_vocab();
  GrammarMatcher m(regex("a+"), v);
  std::vector<uint32_t> mask(size_t(v->num_bitmask_words()));
  m.fill_next_token_bitmask(mask.data());
  EXPECT_FALSE(bit(mask, v->eos_ids()[0]));  // nothing yet: no EOS
  EXPECT_FALSE(m.accept_token(v->eos_ids()[0]));
  EXPECT_FALSE(m.is_terminated());
  ASSERT_TRUE(m.accept_bytes("aa"));
  m.fill_next_token_bitmask(mask.data());
  EXPECT_TRUE(bit(mask, v->eos_ids()[0]));
  EXPECT_TRUE(bit(mask, v->eos_ids()[1]));
  EXPECT_FALSE(m.is_terminated());  // more a's may follow
  for (int32_t t = v->eos_ids()[1] + 1; t < v->vocab_size(); ++t)
    EXPECT_FALSE(bit(mask, t)) << "padding " << t;
  EXPECT_FALSE(bit(mask, v->eos_ids()[0] - 1));  // the byte-less id
  EXPECT_FALSE(m.accept_token(v->eos_ids()[0] - 1));
  EXPECT_FALSE(m.accept_token(399));
  EXPECT_FALSE(m.accept_token(400));
  EXPECT_FALSE(m.accept_token(-1));
  EXPECT_TRUE(m.accept_token(id_of_aaaa(v)));
  EXPECT_TRUE(m.can_end());
  m.reset();
  EXPECT_FALSE(m.can_end());
}

TEST(GrammarMatcher, CopiesAreIndependent) {
  const auto v = test::byte_vocab();
  GrammarMatcher a(test::choice({"left", "right", "lefty"}), v);
  ASSERT_TRUE(a.accept_bytes("le"));
  GrammarMatcher b = a;
  EXPECT_TRUE(a.accept_bytes("ft"));
  EXPECT_TRUE(a.can_end());
  EXPECT_FALSE(b.can_end());
  EXPECT_TRUE(b.accept_bytes("fty"));
  EXPECT_TRUE(b.is_terminated());
  EXPECT_FALSE(a.is_terminated());
  EXPECT_FALSE(b.accept_bytes("x"));
}

TEST(GrammarMatcher, TooAmbiguousIsAnErrorNamingTheLimit) {
  // Each 'a' doubles the parse stacks (a "b" or a "c" closes it later).
  const auto g = gbnf(R"g(root ::= x
x ::= "a" x "b" | "a" x "c" | "")g");
  GrammarMatcher m(g, test::byte_vocab());
  try {
    for (int i = 0; i < 30; ++i) m.accept_bytes("a");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "max_parse_stacks");
  }
}

TEST(GrammarMatcher, SharesMasksThroughTheGrammar) {
  const auto v = mixed_vocab();
  const auto g = schema(R"js({"type": "object", "properties": {"x": {"type": "string"}}})js");
  std::vector<uint32_t> m1(size_t(v->num_bitmask_words())), m2(m1.size());
  GrammarMatcher a(g, v), b(g, v);
  ASSERT_TRUE(a.accept_bytes("{\"x\":\"ab"));
  ASSERT_TRUE(b.accept_bytes("{\"x\": \"ab"));  // another path to the same state
  const int n1 = a.fill_next_token_bitmask(m1.data());
  const size_t cached = g->mask_cache(v)->full.size();
  const int n2 = b.fill_next_token_bitmask(m2.data());
  EXPECT_EQ(n1, n2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(g->mask_cache(v)->full.size(), cached);  // the second came from the cache
  // Threads with matchers of their own over one grammar.
  std::vector<std::thread> threads;
  std::vector<std::vector<uint32_t>> masks(4, std::vector<uint32_t>(m1.size()));
  for (size_t i = 0; i < masks.size(); ++i) {
    threads.emplace_back([&, i] {
      GrammarMatcher m(g, v);
      m.accept_bytes("{\"x\":\"abab");
      m.fill_next_token_bitmask(masks[i].data());
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& m : masks) EXPECT_EQ(m, m1);
}

TEST(TokenVocabulary, Errors) {
  const std::vector<std::string> bytes = {"a", "b"};
  EXPECT_THROW(TokenVocabulary(bytes, 1, {0}), Error);  // smaller than the tokens given
  try {
    TokenVocabulary(bytes, 4, {7});
    FAIL();
  } catch (const Error& e) {
    EXPECT_ERROR_HAS(std::string(e.what()), "EOS id 7");
  }
  EXPECT_THROW(TokenVocabulary(bytes, 4, {}), Error);
  const TokenVocabulary v(bytes, 4, {3});
  EXPECT_EQ(v.num_bitmask_words(), 1);
  EXPECT_EQ(v.num_sorted(), 2);
  EXPECT_EQ(v.token_bytes(2), "");  // padding
}

TEST(GrammarCache, SharesBoundsAndDoesNotCacheErrors) {
  GrammarCache cache(2);
  const GrammarSpec a{GrammarSpec::Kind::kRegex, "a+", {}}, b{GrammarSpec::Kind::kRegex, "b+", {}};
  const GrammarSpec c{GrammarSpec::Kind::kChoice, "", {"x", "y"}},
      bad{GrammarSpec::Kind::kRegex, "(", {}};
  const auto ga = cache.get(a);
  EXPECT_EQ(cache.get(a), ga);
  EXPECT_NE(cache.get(b), ga);
  cache.get(c);  // evicts a, the least recently used
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.get(a), ga);
  for (int i = 0; i < 2; ++i) EXPECT_THROW(cache.get(bad), Error);
  EXPECT_EQ(cache.size(), 2u);
  // Same spec from many threads: one compile, one grammar.
  GrammarCache shared(8);
  const GrammarSpec s{GrammarSpec::Kind::kJsonObject, "", {}};
  std::vector<std::shared_ptr<const CompiledGrammar>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = shared.get(s); });
  for (std::thread& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, got[0]);
  // Choices are part of the key.
  EXPECT_NE(shared.get({GrammarSpec::Kind::kChoice, "", {"ab"}}),
            shared.get({GrammarSpec::Kind::kChoice, "", {"a", "b"}}));
}

}  // namespace
}  // namespace nanovllm::structured
