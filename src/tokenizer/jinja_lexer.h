#pragma once
// The chat-template lexer: template source -> a flat token stream, as jinja2's lexer makes it
// with trim_blocks=True and lstrip_blocks=True. Whitespace control ({%- -%} {{- -}} {#- -#},
// and + to opt out) is applied here, so Data tokens hold exactly the text to emit. Comments
// vanish; {% raw %} bodies become Data.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "util/check.h"

namespace nanovllm::jinja {

// An Error whose message already names its template line.
class LocatedError : public Error {
 public:
  using Error::Error;
};

// Throws LocatedError("chat template line N: ...") for an error located in the template.
template <typename... Args>
[[noreturn]] void fail_at(int line, fmt::format_string<Args...> f, Args&&... args) {
  throw LocatedError(fmt::format("chat template line {}: {}", line, fmt::format(f, std::forward<Args>(args)...)));
}

enum class TokenType { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  TokenType type = TokenType::Eof;
  std::string text;  // Data: the text; Name/Op: the spelling; String: the unescaped value
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Tokenizes a whole template; the stream ends with one Eof token. Error (naming the line) on
// an unterminated tag, comment, string or raw block, or an unexpected character in a tag.
std::vector<Token> tokenize(std::string_view source);

}  // namespace nanovllm::jinja
