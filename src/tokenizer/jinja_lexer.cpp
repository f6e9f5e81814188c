#include "tokenizer/jinja_lexer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tokenizer/jinja_value.h"

namespace nanovllm::jinja {
namespace {

// jinja2: "\r\n" and "\r" become "\n"; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view in) {
  std::string s;
  s.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      s += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      s += in[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Length of the whitespace run (Python's \s, Unicode) starting at s[i].
size_t ws_run(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    size_t k = j;
    if (!py_isspace(utf8_decode(s, k))) break;
    j = k;
  }
  return j - i;
}

// s without its trailing whitespace (Python's str.rstrip()).
std::string_view rstrip_ws(std::string_view s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    if (!py_isspace(utf8_decode(s, i))) end = i;
  }
  return s.substr(0, end);
}

// The OptionalLStrip rule of jinja2 for the text before a tag: `-` strips all whitespace
// before the tag; otherwise lstrip_blocks strips the tag's line indentation (block and comment
// tags only) when only whitespace precedes the tag on its line.
std::string_view strip_before_tag(std::string_view text, char sign, bool is_variable, bool line_starting) {
  if (sign == '-') return rstrip_ws(text);
  if (sign == '+' || is_variable) return text;
  size_t nl = text.rfind('\n');
  size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
  if ((l_pos > 0 || line_starting) && l_pos < text.size() && ws_run(text, l_pos) == text.size() - l_pos)
    return text.substr(0, l_pos);
  return text;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run();

 private:
  int line_at(size_t pos) {  // positions are asked for in increasing order
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_) line_ += src_[line_pos_] == '\n';
    return line_;
  }
  bool at(size_t pos, const char* s) const { return src_.compare(pos, std::strlen(s), s) == 0; }
  void emit(TokenType type, std::string text, size_t pos) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_at(pos);
    out_.push_back(std::move(t));
  }
  size_t lex_comment(size_t pos);
  size_t lex_tag(size_t pos, bool is_block);
  size_t lex_raw(size_t pos);
  size_t lex_string(size_t pos);
  size_t lex_number(size_t pos);
  // If a raw block opens at src_[pos] ("{%"), the position after its opening tag, else 0.
  size_t raw_open_end(size_t pos) const;

  std::string src_;
  std::vector<Token> out_;
  size_t line_pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the previous match ended with a newline (jinja2's line_starting)
};

std::vector<Token> Lexer::run() {
  size_t pos = 0;
  while (pos < src_.size()) {
    size_t tag = pos;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src_.size() || std::strchr("{%#", src_[tag + 1])) break;
      ++tag;
    }
    if (tag == std::string::npos || tag + 1 >= src_.size()) {
      emit(TokenType::Data, src_.substr(pos), pos);
      break;
    }
    char kind = src_[tag + 1];
    size_t after = tag + 2;
    char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
    std::string_view text = strip_before_tag(std::string_view(src_).substr(pos, tag - pos), sign, kind == '{',
                                             line_starting_);
    if (!text.empty()) emit(TokenType::Data, std::string(text), pos);
    if (sign) ++after;
    line_starting_ = false;
    if (kind == '#') {
      pos = lex_comment(after);
    } else if (kind == '%' && raw_open_end(tag)) {
      pos = lex_raw(raw_open_end(tag));
    } else {
      emit(kind == '%' ? TokenType::BlockBegin : TokenType::VarBegin, "", tag);
      pos = lex_tag(after, kind == '%');
    }
  }
  emit(TokenType::Eof, "", src_.size());
  return std::move(out_);
}

size_t Lexer::lex_comment(size_t pos) {
  for (size_t k = pos; k < src_.size(); ++k) {
    size_t end = 0;
    if (at(k, "+#}")) {
      end = k + 3;
    } else if (at(k, "-#}")) {
      end = k + 3 + ws_run(src_, k + 3);
    } else if (at(k, "#}")) {
      end = k + 2 + (k + 2 < src_.size() && src_[k + 2] == '\n');  // trim_blocks
    }
    if (end) {
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
  }
  fail_at(line_at(pos), "missing end of comment tag");
}

size_t Lexer::raw_open_end(size_t pos) const {
  size_t k = pos + 2;
  if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) ++k;
  k += ws_run(src_, k);
  if (!at(k, "raw")) return 0;
  k += 3;
  k += ws_run(src_, k);
  if (at(k, "-%}")) return k + 3 + ws_run(src_, k + 3);
  if (at(k, "%}")) return k + 2;  // no trim_blocks after {% raw %}, as jinja2
  return 0;
}

size_t Lexer::lex_raw(size_t pos) {
  line_starting_ = src_[pos - 1] == '\n';
  for (size_t k = src_.find("{%", pos); k != std::string::npos; k = src_.find("{%", k + 1)) {
    size_t j = k + 2;
    char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
    if (sign) ++j;
    j += ws_run(src_, j);
    if (!at(j, "endraw")) continue;
    j += 6;
    j += ws_run(src_, j);
    size_t end = 0;
    if (at(j, "+%}")) end = j + 3;
    else if (at(j, "-%}")) end = j + 3 + ws_run(src_, j + 3);
    else if (at(j, "%}")) end = j + 2 + (j + 2 < src_.size() && src_[j + 2] == '\n');
    if (!end) continue;
    std::string_view body = strip_before_tag(std::string_view(src_).substr(pos, k - pos), sign, false, line_starting_);
    if (!body.empty()) emit(TokenType::Data, std::string(body), pos);
    line_starting_ = src_[end - 1] == '\n';
    return end;
  }
  fail_at(line_at(pos), "missing end of raw directive");
}

size_t Lexer::lex_tag(size_t pos, bool is_block) {
  std::vector<char> balance;  // expected closing brackets
  size_t k = pos;
  while (true) {
    if (k >= src_.size()) fail_at(line_at(pos), "unexpected end of template inside a {} tag", is_block ? "{% %}" : "{{ }}");
    if (balance.empty()) {
      size_t end = 0;
      if (is_block) {
        if (at(k, "+%}")) end = k + 3;
        else if (at(k, "-%}")) end = k + 3 + ws_run(src_, k + 3);
        else if (at(k, "%}")) end = k + 2 + (k + 2 < src_.size() && src_[k + 2] == '\n');
      } else {
        if (at(k, "-}}")) end = k + 3 + ws_run(src_, k + 3);
        else if (at(k, "}}")) end = k + 2;
      }
      if (end) {
        emit(is_block ? TokenType::BlockEnd : TokenType::VarEnd, "", k);
        line_starting_ = src_[end - 1] == '\n';
        return end;
      }
    }
    char c = src_[k];
    if (size_t n = ws_run(src_, k)) {
      k += n;
    } else if (c >= '0' && c <= '9') {
      k = lex_number(k);
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = k;
      while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
      emit(TokenType::Name, src_.substr(k, j - k), k);
      k = j;
    } else if (c == '\'' || c == '"') {
      k = lex_string(k);
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                         "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
      const char* op = nullptr;
      for (const char* o : kOps)
        if (at(k, o)) {
          op = o;
          break;
        }
      if (!op) fail_at(line_at(k), "unexpected character '{}' in a tag", c);
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty() || balance.back() != c) fail_at(line_at(k), "unexpected '{}'", c);
        balance.pop_back();
      }
      emit(TokenType::Op, op, k);
      k += std::strlen(op);
    }
  }
}

size_t Lexer::lex_number(size_t pos) {
  auto digits = [&](size_t j) {  // \d+(_\d+)*
    while (j < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[j])) ||
                               (src_[j] == '_' && j + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j + 1])))))
      ++j;
    return j;
  };
  size_t j = digits(pos);
  bool is_float = false;
  if (pos == 0 || src_[pos - 1] != '.') {  // jinja2's float rule has (?<!\.)
    if (j + 1 < src_.size() && src_[j] == '.' && std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
      j = digits(j + 1);
      is_float = true;
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t e = j + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        j = digits(e);
        is_float = true;
      }
    }
  }
  std::string text;
  for (size_t i = pos; i < j; ++i)
    if (src_[i] != '_') text += src_[i];
  emit(is_float ? TokenType::Float : TokenType::Int, text, pos);
  errno = 0;
  if (is_float) {
    out_.back().float_value = std::strtod(text.c_str(), nullptr);  // as Python: 1e999 is inf
  } else {
    out_.back().int_value = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) fail_at(out_.back().line, "integer literal out of the 64-bit range: {}", text);
  }
  return j;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body.
std::string unescape(std::string_view s, int line) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    switch (c) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': case 'u': case 'U': {
        size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          int h = i + k < s.size() ? hex_value(s[i + k]) : -1;
          if (h < 0) fail_at(line, "truncated \\{} escape in a string literal", c);
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10ffff) fail_at(line, "illegal Unicode character in a string literal");
        utf8_append(out, cp);
        i += n;
        break;
      }
      case 'N': fail_at(line, "unsupported \\N{{...}} escape in a string literal");
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          for (; k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7'; ++k) cp = cp * 8 + (s[i + k] - '0');
          utf8_append(out, cp);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

size_t Lexer::lex_string(size_t pos) {
  char quote = src_[pos];
  size_t j = pos + 1;
  while (j < src_.size() && src_[j] != quote) j += src_[j] == '\\' ? 2 : 1;
  if (j >= src_.size()) fail_at(line_at(pos), "unterminated string literal");
  emit(TokenType::String, "", pos);
  out_.back().text = unescape(std::string_view(src_).substr(pos + 1, j - pos - 1), out_.back().line);
  return j + 1;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace nanovllm::jinja
