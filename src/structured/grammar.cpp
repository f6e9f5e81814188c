#include "structured/grammar.h"

#include <fmt/format.h>

namespace nanovllm::structured {

namespace {

void append_byte(uint8_t b, std::string& out) {
  if (b >= 0x20 && b < 0x7F && b != '\\' && b != ']' && b != '-' && b != '^' && b != '"') {
    out += char(b);
  } else {
    out += fmt::format("\\x{:02X}", b);
  }
}

std::string byte_set_text(const ByteSet& s) {
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.contains(uint8_t(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.contains(uint8_t(e + 1))) ++e;
    append_byte(uint8_t(b), out);
    if (e > b) {
      out += '-';
      append_byte(uint8_t(e), out);
    }
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (const GrammarRule& r : rules) {
    out += r.name + " ::=";
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a > 0) out += " |";
      bool empty = true;
      for (uint32_t p = r.alternatives[a]; elements[p].kind != ElementKind::kEnd; ++p) {
        const Element e = elements[p];
        out += ' ';
        out += e.kind == ElementKind::kByteSet ? byte_set_text(byte_sets[e.value])
                                               : rules[e.value].name;
        empty = false;
      }
      if (empty) out += " \"\"";
    }
    out += '\n';
  }
  return out;
}

}  // namespace nanovllm::structured
