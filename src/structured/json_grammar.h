#pragma once
// The JSON rules shared by json_object and JSON Schema grammars, made on first use in a
// GrammarBuilder. Output is JSON as RFC 8259 writes it, with this bounded whitespace policy
// (llama.cpp's): each gap between tokens ("{", "[", ",", ":", keys and values) holds at most
// one `ws ::= "" | " " | "\n" [ \t]{0,20}`, so a model cannot loop forever in whitespace;
// none before the top-level value or after it.
// Strings: raw UTF-8 code points but '"', '\' and controls (< 0x20); escapes \" \\ \/ \b \f \n
// \r \t and \uXXXX of non-surrogates (a lone or paired surrogate escape would make the decoded
// length differ from the grammar's count).
#include <cstdint>

#include "structured/grammar_expr.h"

namespace nanovllm::structured {

class JsonRules {
 public:
  explicit JsonRules(GrammarBuilder& b) : b_(b) {}

  uint32_t ws();           // the whitespace gap above
  uint32_t string_char();  // one character of a string's content (raw or escaped)
  uint32_t string();       // "..." with any content
  uint32_t integer();      // -?(0|[1-9][0-9]*)
  uint32_t number();       // integer (. digits)? ([eE] [+-]? digits)?
  uint32_t value();        // any JSON value
  uint32_t object();       // any JSON object
  uint32_t array();        // any JSON array

  Expr ws_expr() { return Expr::ref(ws()); }

 private:
  uint32_t make(const char* name, Expr body);
  GrammarBuilder& b_;
  int64_t ws_ = -1, string_char_ = -1, string_ = -1, integer_ = -1, number_ = -1, value_ = -1,
          object_ = -1, array_ = -1;
};

// `e` (text of a decoded JSON string, e.g. a compiled "pattern") rewritten to match the
// content of its JSON string literal: '"', '\' and controls become escapes (\" \\ \n \r \t
// \b \f, else \u00XX); other code points stay raw.
Expr json_escape_content(const Expr& e);

}  // namespace nanovllm::structured
