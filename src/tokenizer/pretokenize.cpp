#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "tokenizer/utf8.h"
#include "util/check.h"

namespace nanovllm {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "tokenizer/unicode_hf_delta.inc"

// Unicode White_Space, which Oniguruma's \s is (PCRE2's also has U+180E).
constexpr const char* kWhiteSpaceClass =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

template <size_t N>
std::string class_text(const CodePointRange (&ranges)[N]) {
  std::string out;
  for (const CodePointRange& r : ranges) {
    out += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first));
    if (r.last != r.first) out += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(r.last));
  }
  return out;
}

}  // namespace

std::string hf_compatible_pattern(std::string_view p) {
  static const std::string extra_letters = class_text(kHfExtraLetters);
  static const std::string extra_numbers = class_text(kHfExtraNumbers);
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      if (d == 'Q') {  // \Q...\E: literal text
        const size_t end = p.find("\\E", i + 2);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i, stop - i));
        i = stop;
        continue;
      }
      if (d == 'p' || d == 'P') {
        size_t stop = i + 3;  // \pL
        std::string_view name = p.substr(i + 2, 1);
        if (i + 2 < p.size() && p[i + 2] == '{') {
          const size_t close = p.find('}', i + 3);
          stop = close == std::string_view::npos ? p.size() : close + 1;
          name = p.substr(i + 3, stop - 1 - (i + 3));
        }
        const std::string* extra = name == "L" ? &extra_letters : name == "N" ? &extra_numbers : nullptr;
        if (extra == nullptr || (d == 'P' && in_class)) {
          out.append(p.substr(i, stop - i));
        } else {
          const std::string body = fmt::format("\\p{{{}}}{}", name, *extra);
          out += in_class ? body : (d == 'p' ? "[" : "[^") + body + "]";
        }
        i = stop;
        continue;
      }
      if (d == 's' || (d == 'S' && !in_class)) {
        out += in_class ? std::string(kWhiteSpaceClass)
                        : (d == 's' ? "[" : "[^") + std::string(kWhiteSpaceClass) + "]";
        i += 2;
        continue;
      }
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a literal ']' first in the class
      continue;
    }
    if (c == '[' && in_class && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t close = p.find(":]", i + 2);
      const size_t stop = close == std::string_view::npos ? i + 1 : close + 2;
      out.append(p.substr(i, stop - i));
      i = stop;
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
    ++i;
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& where) : code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string compiled = hf_compatible_pattern(pattern);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                              PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("{}: regex does not compile at offset {}: {} (pattern: {})", where, offset,
         reinterpret_cast<const char*>(message), pattern);
  }
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
}

Regex::~Regex() = default;

namespace {

// Byte offset just past the UTF-8 character that starts at s[pos] (pos < s.size()).
size_t next_char_offset(std::string_view s, size_t pos) {
  ++pos;
  while (pos < s.size() && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace

void Regex::find_matches(std::string_view s, std::vector<PatternPiece>& out) const {
  if (s.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  NV_CHECK(md != nullptr, "out of memory");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t gap = 0;                  // start of text not yet covered by a piece
  size_t search = 0;               // where the next search starts (past the end: done)
  size_t last_match_end = SIZE_MAX;
  while (search <= s.size()) {
    const int rc = pcre2_match(code_->code, subject, s.size(), search, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("pre-tokenizer regex failed with PCRE2 error {}", rc);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (start == end) {  // empty: the next search starts one character on
      search = end < s.size() ? next_char_offset(s, end) : s.size() + 1;
      if (end == last_match_end) continue;  // not right after the previous match
    } else {
      search = end;
    }
    last_match_end = end;
    if (start > gap) out.push_back({gap, start, false});
    out.push_back({start, end, true});
    gap = end;
  }
  if (gap < s.size()) out.push_back({gap, s.size(), false});
  pcre2_match_data_free(md);
}

void Regex::split_isolated(std::string_view s, std::vector<std::string_view>& pieces) const {
  std::vector<PatternPiece> matches;
  find_matches(s, matches);
  apply_split_behavior(s, matches, SplitBehavior::kIsolated, false, pieces);
}

void apply_split_behavior(std::string_view s, const std::vector<PatternPiece>& pieces,
                          SplitBehavior behavior, bool invert, std::vector<std::string_view>& out) {
  if (behavior == SplitBehavior::kIsolated) {  // the common case, without the copy below
    for (const PatternPiece& p : pieces) {
      if (p.end > p.begin) out.push_back(s.substr(p.begin, p.end - p.begin));
    }
    return;
  }
  // (begin, end) of each resulting split, before empty ones are dropped.
  std::vector<std::pair<size_t, size_t>> splits;
  bool previous_match = false;
  const auto is_match = [&](const PatternPiece& p) { return p.is_match != invert; };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      break;  // handled above
    case SplitBehavior::kRemoved:
      for (const PatternPiece& p : pieces) {
        if (!is_match(p)) splits.emplace_back(p.begin, p.end);
      }
      break;
    case SplitBehavior::kContiguous:  // runs of matches, runs of gaps
      for (const PatternPiece& p : pieces) {
        if (is_match(p) == previous_match && !splits.empty()) {
          splits.back().second = p.end;
        } else {
          splits.emplace_back(p.begin, p.end);
        }
        previous_match = is_match(p);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:  // a match joins the gap before it
      for (const PatternPiece& p : pieces) {
        if (is_match(p) && !previous_match && !splits.empty()) {
          splits.back().second = p.end;
        } else {
          splits.emplace_back(p.begin, p.end);
        }
        previous_match = is_match(p);
      }
      break;
    case SplitBehavior::kMergedWithNext:  // a match joins the gap after it (scanned backwards)
      for (size_t i = pieces.size(); i-- > 0;) {
        const PatternPiece& p = pieces[i];
        if (is_match(p) && !previous_match && !splits.empty()) {
          splits.back().first = p.begin;
        } else {
          splits.emplace_back(p.begin, p.end);
        }
        previous_match = is_match(p);
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (const auto& [begin, end] : splits) {
    if (end > begin) out.push_back(s.substr(begin, end - begin));
  }
}

namespace {

// Metaspace on one piece: spaces replaced, the replacement prepended as the scheme says, and
// the result split before each replacement (MergedWithNext), or kept whole.
void metaspace(const PreTokenizeStep& step, std::string_view piece, bool at_input_start,
               std::vector<std::string_view>& out, std::deque<std::string>& arena) {
  std::string& text = arena.emplace_back();
  const bool starts_with_replacement = piece.substr(0, step.replacement.size()) == step.replacement ||
                                       (!piece.empty() && piece.front() == ' ');
  if (!starts_with_replacement && (step.prepend == PreTokenizeStep::Prepend::kAlways ||
                                   (step.prepend == PreTokenizeStep::Prepend::kFirst && at_input_start))) {
    text = step.replacement;
  }
  for (char c : piece) {
    if (c == ' ') {
      text += step.replacement;
    } else {
      text += c;
    }
  }
  if (!step.metaspace_split) {
    out.push_back(text);
    return;
  }
  size_t begin = 0;
  for (size_t pos = text.find(step.replacement, 1); pos != std::string::npos;
       pos = text.find(step.replacement, pos + step.replacement.size())) {
    if (pos > begin) out.push_back(std::string_view(text).substr(begin, pos - begin));
    begin = pos;
  }
  if (begin < text.size()) out.push_back(std::string_view(text).substr(begin));
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizeStep>& steps, std::string_view s, bool at_input_start,
                  std::vector<std::string_view>& pieces, std::deque<std::string>& arena) {
  if (s.empty()) return;
  const size_t first = pieces.size();
  pieces.push_back(s);
  // Whether pieces[first] begins at offset 0 of the input (what Metaspace's "first" asks).
  bool first_at_start = at_input_start;
  std::vector<std::string_view> next;
  std::vector<PatternPiece> matches;
  for (const PreTokenizeStep& step : steps) {
    next.clear();
    bool next_first_at_start = false;
    for (size_t i = first; i < pieces.size(); ++i) {
      std::string_view piece = pieces[i];
      const bool at_start = i == first && first_at_start;
      const size_t num_before = next.size();
      if (step.kind == PreTokenizeStep::Kind::kMetaspace) {
        metaspace(step, piece, at_start, next, arena);  // its first piece starts where it started
        if (at_start) next_first_at_start = next.size() > num_before;
        continue;
      }
      if (step.kind == PreTokenizeStep::Kind::kByteLevel && step.add_prefix_space &&
          piece.front() != ' ') {
        std::string& prefixed = arena.emplace_back(1, ' ');
        prefixed.append(piece.data(), piece.size());
        piece = prefixed;
      }
      if (!step.regex) {
        next.push_back(piece);
      } else {
        matches.clear();
        step.regex->find_matches(piece, matches);
        const bool split = step.kind == PreTokenizeStep::Kind::kSplit;
        apply_split_behavior(piece, matches, split ? step.behavior : SplitBehavior::kIsolated,
                             split && step.invert, next);
      }
      if (at_start) next_first_at_start = next.size() > num_before && next[num_before].data() == piece.data();
    }
    first_at_start = next_first_at_start;
    pieces.resize(first);
    pieces.insert(pieces.end(), next.begin(), next.end());
  }
}

}  // namespace nanovllm
