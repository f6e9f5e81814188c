// GBNF (llama.cpp's grammar format) compiled to the byte-level grammar: what each construct
// accepts and rejects, and the Error every bad grammar gets (naming the rule, position or limit).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace nanovllm::structured {
namespace {

using test::accepts;
using test::gbnf;
using test::gbnf_error;

#define EXPECT_ERROR_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(Gbnf, LiteralsAlternativesClasses) {
  const auto g = gbnf(R"g(root ::= "ab" | [c-e]+ | "x" [^a-c])g");
  EXPECT_TRUE(accepts(g, "ab"));
  EXPECT_TRUE(accepts(g, "c"));
  EXPECT_TRUE(accepts(g, "cdeed"));
  EXPECT_TRUE(accepts(g, "xz"));
  EXPECT_TRUE(accepts(g, "x\xC3\xA9"));  // [^a-c] is any code point but a-c: é in UTF-8
  EXPECT_FALSE(accepts(g, ""));
  EXPECT_FALSE(accepts(g, "a"));
  EXPECT_FALSE(accepts(g, "abc"));
  EXPECT_FALSE(accepts(g, "cf"));
  EXPECT_FALSE(accepts(g, "xa"));
  EXPECT_FALSE(accepts(g, "x\xC3"));          // an incomplete code point
  EXPECT_FALSE(accepts(g, "x\xED\xA0\x80"));  // a surrogate is no code point
  EXPECT_FALSE(accepts(g, "x\xC0\xAF"));      // an overlong form
}

TEST(Gbnf, AnyCharAndRepetitions) {
  EXPECT_TRUE(accepts(gbnf("root ::= .{2}"), "\xC3\xA9\xE2\x82\xAC"));  // é€: two code points
  EXPECT_TRUE(accepts(gbnf("root ::= .{2}"), "\n\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(gbnf("root ::= .{2}"), "abc"));
  EXPECT_FALSE(accepts(gbnf("root ::= .{2}"), "\xFF\xFE"));
  const auto g = gbnf(R"g(root ::= "a"{2,3} "b"{2} "c"{1,} "d"{,2} "e"? "f"*)g");
  EXPECT_TRUE(accepts(g, "aabbc"));
  EXPECT_TRUE(accepts(g, "aaabbcccdd"));
  EXPECT_TRUE(accepts(g, "aabbcdefff"));
  EXPECT_FALSE(accepts(g, "abbc"));
  EXPECT_FALSE(accepts(g, "aaaabbc"));
  EXPECT_FALSE(accepts(g, "aabbcddd"));
  EXPECT_FALSE(accepts(g, "aabb"));
}

TEST(Gbnf, EscapesCommentsGroupsAndNewlines) {
  const auto g = gbnf(R"g(# a comment line
root ::= (   # groups may span lines
    "\x41\u00e9\n\t\"\\" |
    [\x30-\x39\]\-]+
  ) tail   # a reference before its definition
tail ::= "!"
)g");
  EXPECT_TRUE(accepts(g, "A\xC3\xA9\n\t\"\\!"));
  EXPECT_TRUE(accepts(g, "09]-!"));
  EXPECT_FALSE(accepts(g, "A!"));
}

TEST(Gbnf, RecursionAndNullableRepetition) {
  const auto balanced = gbnf(R"g(root ::= "(" root ")" root | "")g");
  EXPECT_TRUE(accepts(balanced, ""));
  EXPECT_TRUE(accepts(balanced, "(()())()"));
  EXPECT_FALSE(accepts(balanced, "(()"));
  EXPECT_FALSE(accepts(balanced, "())"));
  // x* of an x that may be empty, and a cycle of tail references: no left recursion that grows.
  const auto nullable = gbnf(R"g(root ::= ("a"?)* "b")g");
  EXPECT_TRUE(accepts(nullable, "b"));
  EXPECT_TRUE(accepts(nullable, "aaab"));
  const auto tail_cycle = gbnf("root ::= a | \"x\"\na ::= root");
  EXPECT_TRUE(accepts(tail_cycle, "x"));
  EXPECT_FALSE(accepts(tail_cycle, "xx"));
  // Right recursion runs in constant stack: far deeper than max_stack_depth.
  EXPECT_TRUE(accepts(gbnf(R"g(root ::= "a" root | "b")g"), std::string(5000, 'a') + "b"));
}

TEST(Gbnf, Errors) {
  EXPECT_ERROR_HAS(gbnf_error("root ::= foo"), "rule 'foo' is not defined");
  EXPECT_ERROR_HAS(gbnf_error("expr ::= \"a\""), "no rule 'root'");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"a\"\nroot ::= \"b\""), "rule 'root' is defined twice");
  EXPECT_ERROR_HAS(gbnf_error("root ::= root \"a\" | \"b\""), "left recursion in rule 'root'");
  EXPECT_ERROR_HAS(gbnf_error("root ::= a\na ::= b \"x\"\nb ::= \"\"? root \"y\" | \"z\""),
                   "left recursion");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"a\" )"), "line 1 column 14");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"abc"), "unterminated literal");
  EXPECT_ERROR_HAS(gbnf_error("root ::= [abc"), "unterminated character class");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"\\q\""), "unknown escape");
  EXPECT_ERROR_HAS(gbnf_error("root = \"a\""), "expected '::='");
  EXPECT_ERROR_HAS(gbnf_error("root ::= <think>"), "token references");
  EXPECT_ERROR_HAS(gbnf_error("root ::= [z-a]"), "out of order");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"a\"{3,2}"), "m > n");
  EXPECT_ERROR_HAS(gbnf_error("root ::= [^\\x00-\\U0010FFFF]"), "matches no string");
  EXPECT_ERROR_HAS(gbnf_error("root ::= a\na ::= a \"x\""), "matches no string");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"\\uD800\""), "no code point");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"\xff\""), "invalid UTF-8");
}

TEST(Gbnf, Limits) {
  const std::string deep = "root ::= " + std::string(5000, '(') + "\"a\"" + std::string(5000, ')');
  EXPECT_ERROR_HAS(gbnf_error(deep), "max_nesting_depth");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"a\"" + std::string(100000, '*')), "max_nesting_depth");
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"a\"{100000}"), "max_repetition");
  GrammarLimits few_rules;
  few_rules.max_rules = 10;
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"a\"{0,50}", few_rules), "max_rules");
  GrammarLimits few_elements;
  few_elements.max_elements = 100;
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"ab\"{500}", few_elements), "max_elements");
  GrammarLimits small_text;
  small_text.max_text_bytes = 8;
  EXPECT_ERROR_HAS(gbnf_error("root ::= \"abcdefgh\"", small_text), "max_text_bytes");
  GrammarLimits no_time;
  no_time.max_compile_seconds = 0;
  EXPECT_ERROR_HAS(gbnf_error("root ::= [a-z]{1,2000}", no_time), "max_compile_seconds");
  // Every message says which front end failed.
  EXPECT_EQ(gbnf_error("root ::= foo").rfind("gbnf: ", 0), 0u);
}

TEST(Gbnf, HostileInputsDoNotCrash) {
  // Many rules, long chains, wide classes: compile or fail with an Error, within the limits.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 3000; ++i) chain += fmt::format("r{} ::= \"x\" r{}\n", i, i + 1);
  chain += "r3000 ::= \"y\"\n";
  const auto g = gbnf(chain);
  EXPECT_TRUE(accepts(g, std::string(3000, 'x') + "y"));
  std::string left = "root ::= r0 \"z\"\n";  // a 3000-long chain of left corners ending in a cycle
  for (int i = 0; i < 3000; ++i) left += fmt::format("r{} ::= r{} \"x\"\n", i, i + 1);
  left += "r3000 ::= r0 \"y\" | \"w\"\n";
  EXPECT_ERROR_HAS(gbnf_error(left), "left recursion");
  // (An empty alternative is the empty string: "root ::=" and "root ::= \"a\" |" compile.)
  EXPECT_TRUE(accepts(gbnf("root ::="), ""));
  EXPECT_TRUE(accepts(gbnf("root ::= \"a\" |"), ""));
  for (const char* junk : {"", "::=", "root ::= (", "root ::= [", "root ::= {1}", "root ::= \"a\"{",
                           "root ::= \"a\"{1,", "root ::= \"\\x4\"", "\n\n#only\n"}) {
    const std::string e = gbnf_error(junk);
    EXPECT_EQ(e.rfind("gbnf: ", 0), 0u) << junk << " -> " << e;
  }
}

TEST(Gbnf, RandomGrammarsCompileOrFailCleanly) {
  const std::vector<std::string> pieces = {
      "root ::= ", "a ::= ",  "\n",    " ",    "a",           "root",     "\"x\"",
      "\"\"",      "\"\\n\"", "[a-c]", "[^a]", "[]",          "[^]",      ".",
      "(",         ")",       "|",     "*",    "+",           "?",        "{2}",
      "{1,3}",     "{,2}",    "{0,}",  "#c\n", "\"\\u00e9\"", "\"\xC3\"", "::="};
  const int compiled = test::fuzz_compile(GrammarSpec::Kind::kGbnf, pieces, 3000, 11);
  EXPECT_GT(compiled, 10);
  // A tight stack limit: still no dead end, masks still the definition.
  EXPECT_GT(test::fuzz_compile(GrammarSpec::Kind::kGbnf, pieces, 3000, 12, 4), 10);
}

}  // namespace
}  // namespace nanovllm::structured
