#pragma once
// The tokenizer.json normalizer, applied to each piece of text between added tokens (and to
// the content of added tokens marked normalized), as Hugging Face's normalizers do:
//   NFC                       Unicode NFC (Hugging Face's tables, see nfc.h)
//   Prepend {prepend}         `prepend` before a non-empty text (SentencePiece's "▁")
//   Replace {pattern, content} every match of a String (literal) or Regex pattern -> content
// A Sequence is the steps in order.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace nanovllm {

struct NormalizerStep {
  enum class Kind { kNfc, kPrepend, kReplace } kind = Kind::kNfc;
  std::string text;                     // kPrepend: what to prepend; kReplace: the replacement
  std::shared_ptr<const Regex> pattern;  // kReplace: what to replace (a literal is escaped)
};

// `s` (valid UTF-8) through every step in order.
std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view s);

// Every match of `pattern` in `s` replaced by `content` (HF's Replace; an empty match gets
// `content` inserted).
std::string replace_matches(const Regex& pattern, std::string_view s, std::string_view content);

// A regex that matches `literal` exactly (ASCII punctuation escaped).
std::string escape_literal(std::string_view literal);

}  // namespace nanovllm
