#include "tokenizer/normalizer.h"

#include <cctype>

#include "tokenizer/nfc.h"

namespace nanovllm {

std::string replace_matches(const Regex& pattern, std::string_view s, std::string_view content) {
  std::vector<PatternPiece> pieces;
  pattern.find_matches(s, pieces);
  std::string out;
  out.reserve(s.size());
  for (const PatternPiece& p : pieces) {
    if (p.is_match) {
      out += content;
    } else {
      out += s.substr(p.begin, p.end - p.begin);
    }
  }
  return out;
}

std::string escape_literal(std::string_view literal) {
  std::string regex;
  for (char c : literal) {
    if (static_cast<uint8_t>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) regex += '\\';
    regex += c;
  }
  return regex;
}

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view s) {
  std::string text(s);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        text = nfc(text);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!text.empty()) text.insert(0, step.text);
        break;
      case NormalizerStep::Kind::kReplace:
        text = replace_matches(*step.pattern, text, step.text);
        break;
    }
  }
  return text;
}

}  // namespace nanovllm
