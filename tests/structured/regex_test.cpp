// Regexes compiled to the byte-level grammar (whole-string match, as Python's re.fullmatch):
// what each construct accepts and rejects, and the Error every unsupported construct gets.
#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace nanovllm::structured {
namespace {

using test::accepts;
using test::regex;
using test::regex_error;

#define EXPECT_ERROR_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(Regex, ClassesAndQuantifiers) {
  const auto phone = regex(R"re(\d{3}-\d{4})re");
  EXPECT_TRUE(accepts(phone, "123-4567"));
  EXPECT_FALSE(accepts(phone, "12-4567"));
  EXPECT_FALSE(accepts(phone, "123-45678"));
  const auto g = regex(R"re((?:ab|cd)+[^abc]?x{2,}y{,2}z{1}\w\s\S\D\W)re");
  EXPECT_TRUE(accepts(g, "abxxz_ ab!"));
  EXPECT_TRUE(accepts(g, "cdabqxxxyyzA\txb-"));
  EXPECT_FALSE(accepts(g, "abxz_ ab!"));      // x{2,}
  EXPECT_FALSE(accepts(g, "abxxyyyz_ ab!"));  // y{,2}
  EXPECT_FALSE(accepts(g, "abaxxz_ ab!"));    // [^abc]
  EXPECT_FALSE(accepts(g, "abxxz_  b!"));     // \S
  EXPECT_FALSE(accepts(g, "abxxz_ a0!"));     // \D
  // \d \w \s are ASCII (re.ASCII): no other digits
  EXPECT_FALSE(accepts(regex(R"re(\d)re"), "\xD9\xA3"));
  EXPECT_TRUE(accepts(regex(R"re(\D)re"), "\xD9\xA3"));
}

TEST(Regex, DotAnchorsEscapesAndLiterals) {
  EXPECT_TRUE(accepts(regex("a.c"),
                      "a\xE2\x82\xAC"
                      "c"));
  EXPECT_FALSE(accepts(regex("a.c"), "a\nc"));  // . is not a newline
  EXPECT_TRUE(accepts(regex("^abc$"), "abc"));
  EXPECT_TRUE(accepts(regex(R"re(a\$)re"), "a$"));
  EXPECT_TRUE(
      accepts(regex(R"re(\.\\\x41\u00e9\x{1F600}\t\*)re"), ".\\A\xC3\xA9\xF0\x9F\x98\x80\t*"));
  EXPECT_TRUE(accepts(regex("a{"), "a{"));  // { that starts no quantifier is a literal
  EXPECT_TRUE(accepts(regex("a{1,x"), "a{1,x"));
  EXPECT_TRUE(accepts(regex("a+?b*?"), "aab"));  // lazy: the same language
  EXPECT_TRUE(accepts(regex("a|b|"), ""));
  EXPECT_TRUE(accepts(regex("(?P<x>a)(?<y>b)"), "ab"));
  EXPECT_TRUE(accepts(regex("[]a]+"), "]a]"));  // ] first in a class is a literal
  EXPECT_TRUE(accepts(regex("[a-]+"), "-a"));
  EXPECT_TRUE(accepts(regex(R"re([\d\-x]+)re"), "1-x"));
  EXPECT_TRUE(accepts(regex(R"re([\b])re"), "\b"));  // backspace inside a class
  EXPECT_TRUE(accepts(regex("caf\xC3\xA9"), "caf\xC3\xA9"));
}

TEST(Regex, Errors) {
  EXPECT_ERROR_HAS(regex_error(R"re((a)\1)re"), "backreferences");
  EXPECT_ERROR_HAS(regex_error(R"re((?P<n>a)(?P=n))re"), "backreferences");
  EXPECT_ERROR_HAS(regex_error(R"re(\k<n>)re"), "backreferences");
  EXPECT_ERROR_HAS(regex_error("(?=a)b"), "lookahead");
  EXPECT_ERROR_HAS(regex_error("(?!a)b"), "lookahead");
  EXPECT_ERROR_HAS(regex_error("(?<=a)b"), "lookbehind");
  EXPECT_ERROR_HAS(regex_error("(?<!a)b"), "lookbehind");
  EXPECT_ERROR_HAS(regex_error(R"re(\bword\b)re"), "word boundaries");
  EXPECT_ERROR_HAS(regex_error(R"re(\Aa)re"), "anchor \\A");
  EXPECT_ERROR_HAS(regex_error("a^b"), "anchor '^'");
  EXPECT_ERROR_HAS(regex_error("a$b"), "anchor '$'");
  EXPECT_ERROR_HAS(regex_error("a*+"), "possessive");
  EXPECT_ERROR_HAS(regex_error("(?i)a"), "inline flags");
  EXPECT_ERROR_HAS(regex_error("(?>a)"), "atomic");
  EXPECT_ERROR_HAS(regex_error("(a"), "missing ')'");
  EXPECT_ERROR_HAS(regex_error("a)"), "unbalanced ')'");
  EXPECT_ERROR_HAS(regex_error("*a"), "nothing to repeat");
  EXPECT_ERROR_HAS(regex_error("a**"), "multiple repeat");
  EXPECT_ERROR_HAS(regex_error(R"re(\p{L})re"), "Unicode property");
  EXPECT_ERROR_HAS(regex_error(R"re(\q)re"), "unknown escape");
  EXPECT_ERROR_HAS(regex_error("[b-a]"), "out of order");
  EXPECT_ERROR_HAS(regex_error("[abc"), "unterminated character class");
  EXPECT_ERROR_HAS(regex_error(R"re([^\x00-\x{10FFFF}])re"), "matches no string");
  EXPECT_ERROR_HAS(regex_error("a{5,2}"), "m > n");
  EXPECT_ERROR_HAS(regex_error("a{1000000}"), "max_repetition");
  EXPECT_ERROR_HAS(regex_error(std::string(1000, '(') + std::string(1000, ')')),
                   "max_nesting_depth");
  EXPECT_ERROR_HAS(regex_error("ab\\"), "trailing backslash");
  EXPECT_EQ(regex_error("(a").rfind("regex: ", 0), 0u);
}

TEST(Regex, RandomPatternsCompileOrFailCleanly) {
  const std::vector<std::string> pieces = {
      "a",   "b",     "\xC3\xA9", ".", "(", ")",   "(?:", "|",  "*",   "+",    "?",
      "{2}", "{1,3}", "{,2}",     "{", "}", "[",   "]",   "[^", "-",   "\\d",  "\\W",
      "\\",  "\\x41", "\\u00e9",  "^", "$", "\\1", "(?=", ",",  "\\.", "[a-z]"};
  const int compiled = test::fuzz_compile(GrammarSpec::Kind::kRegex, pieces, 3000, 12);
  EXPECT_GT(compiled, 100);
}

}  // namespace
}  // namespace nanovllm::structured
