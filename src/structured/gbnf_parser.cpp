#include "structured/gbnf_parser.h"

#include <unordered_map>

#include "util/check.h"

namespace nanovllm::structured {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, GrammarBuilder& b, const GrammarLimits& limits,
             const CompileDeadline& deadline)
      : s_(text), b_(b), limits_(limits), deadline_(deadline) {}

  uint32_t parse() {
    skip_space(true);
    while (pos_ < s_.size()) {
      deadline_.check();
      const size_t name_pos = pos_;
      const std::string name = parse_name();
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") error("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      const uint32_t rule = b_.rule_named(name);
      if (b_.is_defined(rule)) error_at(name_pos, "rule '" + name + "' is defined twice");
      Expr body = parse_alternates(false, 0);
      b_.define(rule, std::move(body));
      skip_space(false);
      if (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') {
        error("expected the end of rule '" + name + "' (a newline), found '" +
              std::string(1, s_[pos_]) + "'");
      }
      skip_space(true);
    }
    for (uint32_t r = 0; r < b_.num_rules(); ++r) {
      if (!b_.is_defined(r)) {
        fail("rule '{}' is not defined (referenced at {})", b_.name(r), where(first_reference_[r]));
      }
    }
    const int64_t root = b_.find_rule("root");
    if (root < 0) fail("no rule 'root' (the start rule) is defined");
    return uint32_t(root);
  }

 private:
  [[noreturn]] void error(const std::string& msg) const { error_at(pos_, msg); }
  [[noreturn]] void error_at(size_t at, const std::string& msg) const {
    fail("{}: {}", where(at), msg);
  }

  std::string where(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "line " + std::to_string(line) + " column " + std::to_string(col);
  }

  void skip_space(bool newline_ok) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == start) {
      error(pos_ < s_.size() ? "expected a rule name, found '" + std::string(1, s_[pos_]) + "'"
                             : "expected a rule name, found the end of input");
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  Expr parse_alternates(bool nested, uint32_t depth) {
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(nested, depth));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(nested, depth));
    }
    return Expr::choice(std::move(alts));
  }

  Expr parse_sequence(bool nested, uint32_t depth) {
    std::vector<Expr> items;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '"') {
        items.push_back(parse_literal());
      } else if (c == '[') {
        items.push_back(parse_class());
      } else if (c == '.') {
        ++pos_;
        items.push_back(Expr::chars(CodePointSet::any()));
      } else if (c == '(') {
        if (depth + 1 > limits_.max_nesting_depth) {
          error("grammar limit max_nesting_depth (" + std::to_string(limits_.max_nesting_depth) +
                ") exceeded by nested parentheses");
        }
        ++pos_;
        skip_space(true);
        Expr inner = parse_alternates(true, depth + 1);
        if (pos_ >= s_.size() || s_[pos_] != ')') error("expected ')'");
        ++pos_;
        items.push_back(std::move(inner));
      } else if (is_name_char(c)) {
        const size_t at = pos_;
        const std::string name = parse_name();
        const uint32_t r = b_.rule_named(name);
        first_reference_.emplace(r, at);
        items.push_back(Expr::ref(r));
      } else if (c == '<') {
        error("token references (<...>) are not supported");
      } else {
        break;
      }
      skip_space(nested);
      uint32_t operators = 0;  // each nests the item once more: they count toward the depth
      while (pos_ < s_.size() &&
             (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?' || s_[pos_] == '{')) {
        if (depth + ++operators > limits_.max_nesting_depth) {
          error("grammar limit max_nesting_depth (" + std::to_string(limits_.max_nesting_depth) +
                ") exceeded by repetition operators");
        }
        Expr& last = items.back();
        const char op = s_[pos_];
        if (op == '*') {
          ++pos_;
          last = Expr::star(std::move(last));
        } else if (op == '+') {
          ++pos_;
          last = Expr::plus(std::move(last));
        } else if (op == '?') {
          ++pos_;
          last = Expr::optional(std::move(last));
        } else {
          const auto [lo, hi] = parse_braces();
          last = Expr::repeat(std::move(last), lo, hi);
        }
        skip_space(nested);
      }
    }
    return Expr::seq(std::move(items));
  }

  uint32_t parse_count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + uint64_t(s_[pos_] - '0');
      if (v > limits_.max_repetition) {
        error_at(start, "grammar limit max_repetition (" + std::to_string(limits_.max_repetition) +
                            ") exceeded by a repetition count");
      }
      ++pos_;
    }
    if (pos_ == start) error("expected a number in {m,n}");
    return uint32_t(v);
  }

  std::pair<uint32_t, uint32_t> parse_braces() {
    const size_t start = pos_;
    ++pos_;  // '{'
    skip_space(true);
    uint32_t lo = 0, hi;
    if (pos_ < s_.size() && s_[pos_] == ',') {
      lo = 0;
    } else {
      lo = parse_count();
      skip_space(true);
    }
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      skip_space(true);
      if (pos_ < s_.size() && s_[pos_] == '}') {
        hi = Expr::kUnbounded;
      } else {
        hi = parse_count();
        skip_space(true);
      }
    } else {
      hi = lo;
    }
    if (pos_ >= s_.size() || s_[pos_] != '}') error("expected '}' closing a repetition");
    ++pos_;
    if (lo > hi) error_at(start, "repetition {m,n} with m > n");
    return {lo, hi};
  }

  // One code point of a literal or class at pos_ (an escape or UTF-8), advancing.
  uint32_t parse_char() {
    if (s_[pos_] == '\\') {
      const size_t at = pos_;
      if (pos_ + 1 >= s_.size()) error("unterminated escape");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
          return uint8_t(e);
        case 'x':
          return parse_hex(2, at);
        case 'u':
          return parse_hex(4, at);
        case 'U':
          return parse_hex(8, at);
        default:
          error_at(at, std::string("unknown escape '\\") + e + "'");
      }
    }
    const int32_t cp = decode_utf8(s_, pos_);
    if (cp < 0) error("invalid UTF-8");
    return uint32_t(cp);
  }

  uint32_t parse_hex(int digits, size_t at) {
    uint64_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = pos_ < s_.size() ? hex_value(s_[pos_]) : -1;
      if (h < 0) error_at(at, "expected " + std::to_string(digits) + " hex digits in an escape");
      v = v * 16 + uint64_t(h);
      ++pos_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
      error_at(at, "escape names no code point");
    return uint32_t(v);
  }

  Expr parse_literal() {
    const size_t start = pos_;
    ++pos_;
    std::string bytes;
    while (true) {
      if (pos_ >= s_.size()) error_at(start, "unterminated literal");
      if (s_[pos_] == '"') break;
      append_utf8(parse_char(), bytes);
    }
    ++pos_;
    return Expr::literal(std::move(bytes));
  }

  Expr parse_class() {
    const size_t start = pos_;
    ++pos_;
    const bool negated = pos_ < s_.size() && s_[pos_] == '^';
    if (negated) ++pos_;
    std::vector<CodePointRange> ranges;
    while (true) {
      if (pos_ >= s_.size()) error_at(start, "unterminated character class");
      if (s_[pos_] == ']') break;
      const size_t at = pos_;
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) error_at(at, "character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    CodePointSet set(std::move(ranges));
    return Expr::chars(negated ? set.complement() : std::move(set));
  }

  std::string_view s_;
  size_t pos_ = 0;
  GrammarBuilder& b_;
  const GrammarLimits& limits_;
  const CompileDeadline& deadline_;
  std::unordered_map<uint32_t, size_t> first_reference_;  // rule -> position of its first reference
};

}  // namespace

uint32_t parse_gbnf(std::string_view text, GrammarBuilder& builder, const GrammarLimits& limits,
                    const CompileDeadline& deadline) {
  return GbnfParser(text, builder, limits, deadline).parse();
}

}  // namespace nanovllm::structured
