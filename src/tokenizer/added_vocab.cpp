#include "tokenizer/added_vocab.h"

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace nanovllm {

namespace {

// Unicode White_Space (what Rust's char::is_whitespace and regex \s accept).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation, join controls.
// Alphabetic is approximated by letters, letter numbers and the circled / squared letters
// (the Other_Alphabetic code points outside the mark categories).
bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
      (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends at s[end) (valid UTF-8, end > 0).
char32_t last_char(std::string_view s, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) --pos;
  return utf8::next(s, pos);
}

size_t char_start_before(std::string_view s, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens,
                                     const std::vector<std::string>& patterns)
    : tokens_(tokens) {
  nodes_.emplace_back();
  for (size_t t = 0; t < patterns.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    first_byte_[static_cast<uint8_t>(p[0])] = true;
    int32_t node = 0;
    for (char ch : p) {
      const uint8_t b = static_cast<uint8_t>(ch);
      int32_t child = -1;
      for (const auto& [byte, index] : nodes_[node].children) {
        if (byte == b) child = index;
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(b, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    // Two tokens with one text: the first listed wins, like the automaton Hugging Face
    // builds (its pattern order).
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

std::pair<int32_t, size_t> AddedTokenMatcher::longest_at(std::string_view s, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < s.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes_[node].children) {
      if (byte == b) {
        child = index;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes_[node].token >= 0) best = {nodes_[node].token, i + 1 - pos};
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view s, bool parse_special, std::vector<Segment>& out) const {
  size_t covered = 0;  // end of the last emitted segment
  size_t pos = 0;
  while (pos < s.size()) {
    if (!first_byte_[static_cast<uint8_t>(s[pos])]) {
      ++pos;
      continue;
    }
    const auto [index, len] = longest_at(s, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos, stop = pos + len;
    pos = stop;  // the search goes on after this match even when the match is dropped
    if (token.special && !parse_special) continue;
    if (token.single_word) {
      const bool word_left = start > 0 && is_word_char(last_char(s, start));
      size_t p = stop;
      const bool word_right = stop < s.size() && is_word_char(utf8::next(s, p));
      if (word_left || word_right) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0 && is_white_space(last_char(s, new_start))) {
        new_start = char_start_before(s, new_start);
      }
      start = std::max(new_start, covered);
    }
    if (token.rstrip) {
      while (stop < s.size()) {
        size_t p = stop;
        if (!is_white_space(utf8::next(s, p))) break;
        stop = p;
      }
    }
    if (start > covered) out.push_back({covered, start, -1});
    out.push_back({start, stop, token.id});
    covered = stop;
  }
  if (covered < s.size()) out.push_back({covered, s.size(), -1});
}

}  // namespace nanovllm
