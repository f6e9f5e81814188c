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

void Regex::split_isolated(std::string_view s, std::vector<std::string_view>& pieces) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  NV_CHECK(md != nullptr, "out of memory");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t gap = 0;  // start of text not yet covered by a piece
  size_t pos = 0;
  while (pos < s.size()) {
    const int rc = pcre2_match(code_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("pre-tokenizer regex failed with PCRE2 error {}", rc);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (end == start) {  // empty match: step over one character
      pos = start + 1;
      while (pos < s.size() && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (start > gap) pieces.push_back(s.substr(gap, start - gap));
    pieces.push_back(s.substr(start, end - start));
    gap = pos = end;
  }
  if (gap < s.size()) pieces.push_back(s.substr(gap));
  pcre2_match_data_free(md);
}

void pre_tokenize(const std::vector<PreTokenizeStep>& steps, std::string_view s,
                  std::vector<std::string_view>& pieces, std::deque<std::string>& arena) {
  if (s.empty()) return;
  const size_t first = pieces.size();
  pieces.push_back(s);
  std::vector<std::string_view> next;
  for (const PreTokenizeStep& step : steps) {
    next.clear();
    for (size_t i = first; i < pieces.size(); ++i) {
      std::string_view piece = pieces[i];
      if (step.kind == PreTokenizeStep::Kind::kByteLevel && step.add_prefix_space &&
          piece.front() != ' ') {
        std::string& prefixed = arena.emplace_back(1, ' ');
        prefixed.append(piece.data(), piece.size());
        piece = prefixed;
      }
      if (step.regex) {
        step.regex->split_isolated(piece, next);
      } else {
        next.push_back(piece);
      }
    }
    pieces.resize(first);
    pieces.insert(pieces.end(), next.begin(), next.end());
  }
}

}  // namespace nanovllm
