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

// Where a pattern matched in a string: contiguous pieces covering it, each flagged as a match
// or a gap between matches (Hugging Face's Pattern::find_matches).
struct PatternPiece {
  size_t begin = 0, end = 0;
  bool is_match = false;
};

// A compiled regex (through hf_compatible_pattern). Thread-safe: match scratch space is allocated per call.
class Regex {
 public:
  // Throws Error naming `where` when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The matches in valid UTF-8 `s` and the gaps between them, in order, as HF's Oniguruma
  // iteration finds them: an empty match is reported (as an empty piece) unless it sits right
  // where the previous match ended; the search then moves on one character. "" gives one
  // empty gap.
  void find_matches(std::string_view s, std::vector<PatternPiece>& out) const;

  // Splits valid UTF-8 `s` into its matches and the non-empty gaps between them, in order
  // (Hugging Face's Split with behavior "Isolated"). Empty pieces are dropped.
  void split_isolated(std::string_view s, std::vector<std::string_view>& pieces) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

// What Split does with the pattern's matches (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// `pieces` (from find_matches, optionally inverted) combined as `behavior` says; appends the
// non-empty results as views into `s`.
void apply_split_behavior(std::string_view s, const std::vector<PatternPiece>& pieces,
                          SplitBehavior behavior, bool invert, std::vector<std::string_view>& out);

// One pre-tokenizer step.
struct PreTokenizeStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit, or kByteLevel with use_regex (GPT-2 pattern)
  SplitBehavior behavior = SplitBehavior::kIsolated;  // kSplit
  bool invert = false;                                // kSplit
  bool add_prefix_space = false;                      // kByteLevel
  // kMetaspace: spaces become `replacement`; it is prepended to pieces that do not start with
  // it (kAlways), only to the piece at the start of the input (kFirst), or never; with
  // `metaspace_split`, the piece is then split before each replacement character.
  std::string replacement;
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool metaspace_split = true;
};

// The GPT-2 pre-tokenizer pattern (ByteLevel with use_regex = true).
extern const char* const kGpt2Pattern;

// Applies the steps to one segment of normalized text, appending pre-tokens (views into
// `s` or into `arena`, which owns any text a step had to create). `at_input_start`: the
// segment begins the input text (Metaspace's "first" scheme prepends only there).
void pre_tokenize(const std::vector<PreTokenizeStep>& steps, std::string_view s, bool at_input_start,
                  std::vector<std::string_view>& pieces, std::deque<std::string>& arena);

}  // namespace nanovllm
