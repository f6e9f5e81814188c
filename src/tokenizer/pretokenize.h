#pragma once
// Pre-tokenization: the regex split of the pre_tokenizer (PCRE2 with UTF + Unicode
// properties, JIT-compiled, classes adjusted to match Hugging Face), plus the ByteLevel
// step's own options.
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/nfc.h"

namespace nanovllm {


// `pattern` (Hugging Face's regex syntax, i.e. Oniguruma's) rewritten for PCRE2 so that
// \p{L}, \p{N}, \s and \S class code points as HF's Oniguruma does: letters and digits
// newer than PCRE2's Unicode tables are added (unicode_hf_delta.inc), and \s is exactly
// Unicode White_Space. Other syntax passes through.
std::string hf_compatible_pattern(std::string_view pattern);

// A compiled regex (through hf_compatible_pattern). Thread-safe: match scratch space is allocated per call.
class Regex {
 public:
  // Throws Error naming `where` when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits valid UTF-8 `s` into its matches and the non-empty gaps between them, in order
  // (Hugging Face's Split with behavior "Isolated"). Empty matches are skipped.
  void split_isolated(std::string_view s, std::vector<std::string_view>& pieces) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

// One pre-tokenizer step of the supported family.
struct PreTokenizeStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit, or kByteLevel with use_regex (GPT-2 pattern)
  bool add_prefix_space = false;       // kByteLevel
};

// The GPT-2 pre-tokenizer pattern (ByteLevel with use_regex = true).
extern const char* const kGpt2Pattern;

// Applies the steps to one segment of normalized text, appending pre-tokens (views into
// `s` or into `arena`, which owns any text a step had to create).
void pre_tokenize(const std::vector<PreTokenizeStep>& steps, std::string_view s,
                  std::vector<std::string_view>& pieces, std::deque<std::string>& arena);

}  // namespace nanovllm
