#include "structured/regex_parser.h"

#include "util/check.h"

namespace nanovllm::structured {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

CodePointSet class_escape_set(char e) {  // \d \w \s and their negations
  CodePointSet s;
  switch (e) {
    case 'd':
    case 'D':
      s = CodePointSet({{'0', '9'}});
      break;
    case 'w':
    case 'W':
      s = CodePointSet({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}});
      break;
    default:
      s = CodePointSet({{'\t', '\r'}, {' ', ' '}});
      break;  // \t \n \v \f \r and space
  }
  return (e >= 'A' && e <= 'Z') ? s.complement() : s;
}

bool is_class_escape(char e) {
  return e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S';
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const GrammarLimits& limits,
              const CompileDeadline& deadline)
      : s_(pattern), limits_(limits), deadline_(deadline) {}

  Expr parse() {
    // ^ at the very start and $ at the very end are the anchors fullmatch implies anyway.
    if (!s_.empty() && s_[0] == '^') pos_ = 1;
    end_ = s_.size();
    if (end_ > pos_ && s_[end_ - 1] == '$') {
      size_t backslashes = 0;
      while (end_ - 1 - backslashes > pos_ && s_[end_ - 2 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 == 0) --end_;
    }
    Expr e = parse_alternation(0);
    if (pos_ < end_) error(s_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return e;
  }

 private:
  [[noreturn]] void error(const std::string& msg) const { error_at(pos_, msg); }
  [[noreturn]] void error_at(size_t at, const std::string& msg) const {
    fail("{} at position {}", msg, at);
  }

  bool more() const { return pos_ < end_; }
  char peek() const { return s_[pos_]; }

  Expr parse_alternation(uint32_t depth) {
    std::vector<Expr> alts;
    alts.push_back(parse_concat(depth));
    while (more() && peek() == '|') {
      ++pos_;
      alts.push_back(parse_concat(depth));
    }
    return Expr::choice(std::move(alts));
  }

  Expr parse_concat(uint32_t depth) {
    std::vector<Expr> items;
    while (more() && peek() != '|' && peek() != ')') {
      deadline_.check();
      if (peek() == '*' || peek() == '+' || peek() == '?') error("nothing to repeat");
      if (peek() == '{' && quantifier_ahead()) error("nothing to repeat");
      items.push_back(parse_quantifiers(parse_atom(depth)));
    }
    return Expr::seq(std::move(items));
  }

  // Is there a {m}, {m,}, {,n} or {m,n} at pos_?
  bool quantifier_ahead() const {
    size_t p = pos_ + 1;
    const size_t d1 = p;
    while (p < end_ && is_digit(s_[p])) ++p;
    const bool has_lo = p > d1;
    if (p < end_ && s_[p] == '}') return has_lo;
    if (p >= end_ || s_[p] != ',') return false;
    ++p;
    while (p < end_ && is_digit(s_[p])) ++p;
    return p < end_ && s_[p] == '}';
  }

  uint32_t parse_count() {
    const size_t at = pos_;
    uint64_t v = 0;
    while (is_digit(peek())) {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > limits_.max_repetition) {
        error_at(at, "grammar limit max_repetition (" + std::to_string(limits_.max_repetition) +
                         ") exceeded by a repetition count");
      }
      ++pos_;
    }
    return uint32_t(v);
  }

  Expr parse_quantifiers(Expr atom) {
    bool quantified = false;
    while (more()) {
      const char c = peek();
      uint32_t lo, hi;
      const size_t at = pos_;
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        lo = c == '+' ? 1 : 0;
        hi = c == '?' ? 1 : Expr::kUnbounded;
      } else if (c == '{' && quantifier_ahead()) {
        ++pos_;
        lo = is_digit(peek()) ? parse_count() : 0;
        hi = lo;
        if (peek() == ',') {
          ++pos_;
          hi = is_digit(peek()) ? parse_count() : Expr::kUnbounded;
        }
        ++pos_;  // '}'
        if (lo > hi) error_at(at, "repetition {m,n} with m > n");
      } else {
        break;
      }
      if (quantified) error_at(at, "multiple repeat");
      quantified = true;
      atom = Expr::repeat(std::move(atom), lo, hi);
      if (more() && peek() == '?') {
        ++pos_;  // lazy: the same language
      } else if (more() && peek() == '+') {
        error("possessive quantifiers are not supported");
      }
    }
    return atom;
  }

  Expr parse_atom(uint32_t depth) {
    const char c = peek();
    if (c == '(') return parse_group(depth);
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return Expr::chars(CodePointSet({{'\n', '\n'}}).complement());
    }
    if (c == '^' || c == '$')
      error(std::string("anchor '") + c + "' is supported only at the ends of the pattern");
    if (c == '\\') {
      const size_t at = pos_;
      if (pos_ + 1 >= end_) error("trailing backslash");
      const char e = s_[pos_ + 1];
      if (is_class_escape(e)) {
        pos_ += 2;
        return Expr::chars(class_escape_set(e));
      }
      check_unsupported_escape(e, at, false);
      std::string bytes;
      append_utf8(parse_char(false), bytes);
      return Expr::literal(std::move(bytes));
    }
    std::string bytes;
    append_utf8(parse_char(false), bytes);
    return Expr::literal(std::move(bytes));
  }

  void check_unsupported_escape(char e, size_t at, bool in_class) const {
    if (e >= '1' && e <= '9') error_at(at, "backreferences are not supported");
    if (e == 'k') error_at(at, "backreferences (\\k) are not supported");
    if (e == 'p' || e == 'P') error_at(at, "Unicode property classes (\\p, \\P) are not supported");
    if (!in_class && (e == 'b' || e == 'B'))
      error_at(at, std::string("word boundaries (\\") + e + ") are not supported");
    if (e == 'A' || e == 'Z' || e == 'z' || e == 'G') {
      error_at(at, std::string("anchor \\") + e + " is not supported");
    }
  }

  Expr parse_group(uint32_t depth) {
    const size_t at = pos_;
    if (depth + 1 > limits_.max_nesting_depth) {
      error("grammar limit max_nesting_depth (" + std::to_string(limits_.max_nesting_depth) +
            ") exceeded by nested groups");
    }
    ++pos_;
    if (more() && peek() == '?') {
      const std::string_view rest = s_.substr(pos_, end_ - pos_);
      if (rest.substr(0, 2) == "?:") {
        pos_ += 2;
      } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!") {
        error_at(at, "lookahead is not supported");
      } else if (rest.substr(0, 3) == "?<=" || rest.substr(0, 3) == "?<!") {
        error_at(at, "lookbehind is not supported");
      } else if (rest.substr(0, 3) == "?P=") {
        error_at(at, "backreferences ((?P=name)) are not supported");
      } else if (rest.substr(0, 3) == "?P<" || rest.substr(0, 2) == "?<") {
        pos_ += rest[1] == 'P' ? 3 : 2;
        const size_t name_start = pos_;
        while (more() && peek() != '>') ++pos_;
        if (!more() || pos_ == name_start) error_at(at, "bad group name");
        ++pos_;
      } else if (rest.substr(0, 2) == "?>") {
        error_at(at, "atomic groups are not supported");
      } else if (rest.substr(0, 2) == "?#") {
        error_at(at, "comments (?#...) are not supported");
      } else if (rest.substr(0, 2) == "?(") {
        error_at(at, "conditional groups are not supported");
      } else {
        error_at(at, "inline flags (?...) are not supported");
      }
    }
    Expr inner = parse_alternation(depth + 1);
    if (!more() || peek() != ')') error_at(at, "missing ')'");
    ++pos_;
    return inner;
  }

  // One code point at pos_ (an escape or UTF-8), advancing. in_class: \b is a backspace.
  uint32_t parse_char(bool in_class) {
    if (peek() != '\\') {
      const int32_t cp = decode_utf8(s_.substr(0, end_), pos_);
      if (cp < 0) error("invalid UTF-8");
      return uint32_t(cp);
    }
    const size_t at = pos_;
    if (pos_ + 1 >= end_) error("trailing backslash");
    const char e = s_[pos_ + 1];
    pos_ += 2;
    switch (e) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'a':
        return 0x07;
      case 'b':
        return 0x08;  // only reached in a class
      case '0':
        if (more() && is_digit(peek())) error_at(at, "octal escapes are not supported");
        return 0;
      case 'x':
        if (more() && peek() == '{') {
          ++pos_;
          const uint32_t cp = parse_hex(0, at);
          if (!more() || peek() != '}') error_at(at, "bad \\x{...} escape");
          ++pos_;
          return cp;
        }
        return parse_hex(2, at);
      case 'u':
        return parse_hex(4, at);
      case 'U':
        return parse_hex(8, at);
      default:
        if (is_alnum(e)) error_at(at, std::string("unknown escape '\\") + e + "'");
        return uint8_t(e);  // escaped punctuation (non-ASCII bytes are not escapable)
    }
  }

  // Exactly `digits` hex digits, or 1..8 of them when digits == 0.
  uint32_t parse_hex(int digits, size_t at) {
    uint64_t v = 0;
    int n = 0;
    while (more() && hex_value(peek()) >= 0 && (digits == 0 ? n < 8 : n < digits)) {
      v = v * 16 + uint64_t(hex_value(peek()));
      ++pos_;
      ++n;
    }
    if (n == 0 || (digits > 0 && n < digits)) error_at(at, "bad hex escape");
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
      error_at(at, "escape names no code point");
    return uint32_t(v);
  }

  Expr parse_class() {
    const size_t start = pos_;
    ++pos_;
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodePointRange> ranges;
    bool first = true;
    while (true) {
      if (!more()) error_at(start, "unterminated character class");
      if (peek() == ']' && !first) break;
      first = false;
      const size_t at = pos_;
      if (peek() == '\\' && pos_ + 1 < end_ && is_class_escape(s_[pos_ + 1])) {
        const char e = s_[pos_ + 1];
        pos_ += 2;
        if (more() && peek() == '-' && pos_ + 1 < end_ && s_[pos_ + 1] != ']')
          error_at(at, "bad character range");
        const CodePointSet escaped = class_escape_set(e);
        ranges.insert(ranges.end(), escaped.ranges().begin(), escaped.ranges().end());
        continue;
      }
      if (peek() == '\\' && pos_ + 1 < end_) check_unsupported_escape(s_[pos_ + 1], at, true);
      const uint32_t lo = parse_char(true);
      uint32_t hi = lo;
      if (more() && peek() == '-' && pos_ + 1 < end_ && s_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\' && pos_ + 1 < end_ && is_class_escape(s_[pos_ + 1]))
          error_at(at, "bad character range");
        if (peek() == '\\' && pos_ + 1 < end_) check_unsupported_escape(s_[pos_ + 1], pos_, true);
        hi = parse_char(true);
        if (hi < lo) error_at(at, "character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    CodePointSet set(std::move(ranges));
    return Expr::chars(negated ? set.complement() : std::move(set));
  }

  std::string_view s_;
  size_t pos_ = 0, end_ = 0;
  const GrammarLimits& limits_;
  const CompileDeadline& deadline_;
};

}  // namespace

Expr parse_regex(std::string_view pattern, const GrammarLimits& limits,
                 const CompileDeadline& deadline) {
  return RegexParser(pattern, limits, deadline).parse();
}

}  // namespace nanovllm::structured
