// Checks, code point by code point, that the pre-tokenizer's \p{L}, \p{N} and \s (PCRE2
// plus src/tokenizer/unicode_hf_delta.inc) class every code point as Hugging Face's
// Oniguruma does. It asks HF through tests/tokenizer/hf_unicode_classes.js, which takes
// ~20 s; it runs in CI like every other test (scripts/install_deps.sh installs node and the
// npm packages; without them it fails). On a mismatch (say, a PCRE2
// or tokenizers upgrade) it prints the ranges unicode_hf_delta.inc should hold.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reference/test_util.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

TEST(TokenizerUnicode, RegexClassesMatchHuggingFace) {
  const fs::path src = test::source_dir();
  ASSERT_TRUE(fs::exists(src / "node_modules/tokenizers"))
      << "node_modules is absent: run scripts/install_deps.sh (npm install) in " << src;
  const fs::path out = fs::path(test::binary_dir()) / "tokenizer_hf_unicode_classes.json";
  const std::string cmd = "node '" + (src / "tests/tokenizer/hf_unicode_classes.js").string() + "' '" + out.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  const nlohmann::json hf = nlohmann::json::parse(in);

  for (const char* cls : {"L", "N", "S"}) {
    std::vector<bool> in_hf(0x110000);
    for (const auto& r : hf[cls]) {
      for (uint32_t c = r[0]; c <= r[1].get<uint32_t>(); ++c) in_hf[c] = true;
    }
    const std::string pattern = std::string(cls) == "S" ? "\\s" : std::string("\\p{") + cls + "}";
    const Regex re(pattern, "test");
    std::vector<std::pair<uint32_t, uint32_t>> missing, extra;  // vs HF
    for (uint32_t c = 0; c < 0x110000; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      std::string s;
      utf8::append(s, c);
      // Matches and gaps both come back as pieces: "cc" is two pieces iff c matches.
      const std::string twice = s + s;
      std::vector<std::string_view> pieces;
      re.split_isolated(twice, pieces);
      const bool matched = pieces.size() == 2;
      if (matched == in_hf[c]) continue;
      auto& list = in_hf[c] ? missing : extra;
      if (!list.empty() && list.back().second == c - 1) {
        list.back().second = c;
      } else {
        list.emplace_back(c, c);
      }
    }
    std::string report;
    for (const auto& [a, b] : missing) report += fmt::format("{{0x{:X}, 0x{:X}}}, ", a, b);
    EXPECT_TRUE(missing.empty()) << cls << ": HF has these, we do not: " << report;
    report.clear();
    for (const auto& [a, b] : extra) report += fmt::format("{{0x{:X}, 0x{:X}}}, ", a, b);
    EXPECT_TRUE(extra.empty()) << cls << ": we have these, HF does not: " << report;
  }
}

}  // namespace
}  // namespace nanovllm
