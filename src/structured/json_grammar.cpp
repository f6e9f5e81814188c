#include "structured/json_grammar.h"

#include <fmt/format.h>

namespace nanovllm::structured {

namespace {

Expr lit(const char* s) { return Expr::literal(s); }
Expr cls(std::vector<CodePointRange> r) { return Expr::chars(CodePointSet(std::move(r))); }
Expr digits() { return Expr::plus(cls({{'0', '9'}})); }

}  // namespace

uint32_t JsonRules::make(const char* name, Expr body) {
  const uint32_t r = b_.add_rule(name);
  b_.define(r, std::move(body));
  return r;
}

uint32_t JsonRules::ws() {
  if (ws_ < 0) {
    ws_ = make(
        "ws", Expr::optional(Expr::choice(
                  {lit(" "),
                   Expr::seq({lit("\n"), Expr::repeat(cls({{' ', ' '}, {'\t', '\t'}}), 0, 20)})})));
  }
  return uint32_t(ws_);
}

uint32_t JsonRules::string_char() {
  if (string_char_ < 0) {
    const Expr hex = cls({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
    // \uXXXX but D800-DFFF: first digit not d/D, or d/D followed by 0-7.
    const Expr unicode = Expr::seq(
        {lit("u"),
         Expr::choice({Expr::seq({cls({{'0', '9'}, {'a', 'c'}, {'e', 'f'}, {'A', 'C'}, {'E', 'F'}}),
                                  hex, hex, hex}),
                       Expr::seq({cls({{'d', 'd'}, {'D', 'D'}}), cls({{'0', '7'}}), hex, hex})})});
    const Expr escape = Expr::seq({lit("\\"), Expr::choice({cls({{'"', '"'},
                                                                 {'\\', '\\'},
                                                                 {'/', '/'},
                                                                 {'b', 'b'},
                                                                 {'f', 'f'},
                                                                 {'n', 'n'},
                                                                 {'r', 'r'},
                                                                 {'t', 't'}}),
                                                            unicode})});
    const Expr raw = Expr::chars(CodePointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}).complement());
    string_char_ = make("char", Expr::choice({raw, escape}));
  }
  return uint32_t(string_char_);
}

uint32_t JsonRules::string() {
  if (string_ < 0)
    string_ =
        make("string", Expr::seq({lit("\""), Expr::star(Expr::ref(string_char())), lit("\"")}));
  return uint32_t(string_);
}

uint32_t JsonRules::integer() {
  if (integer_ < 0) {
    integer_ = make(
        "integer",
        Expr::seq({Expr::optional(lit("-")),
                   Expr::choice({lit("0"),
                                 Expr::seq({cls({{'1', '9'}}), Expr::star(cls({{'0', '9'}}))})})}));
  }
  return uint32_t(integer_);
}

uint32_t JsonRules::number() {
  if (number_ < 0) {
    number_ = make("number",
                   Expr::seq({Expr::ref(integer()), Expr::optional(Expr::seq({lit("."), digits()})),
                              Expr::optional(Expr::seq(
                                  {cls({{'e', 'e'}, {'E', 'E'}}),
                                   Expr::optional(cls({{'+', '+'}, {'-', '-'}})), digits()}))}));
  }
  return uint32_t(number_);
}

uint32_t JsonRules::value() {
  if (value_ < 0) {
    value_ = b_.add_rule("value");  // declared first: object and array refer back to it
    b_.define(uint32_t(value_),
              Expr::choice({Expr::ref(object()), Expr::ref(array()), Expr::ref(string()),
                            Expr::ref(number()), lit("true"), lit("false"), lit("null")}));
  }
  return uint32_t(value_);
}

uint32_t JsonRules::object() {
  if (object_ < 0) {
    object_ = b_.add_rule("object");
    const Expr pair = Expr::seq(
        {Expr::ref(string()), ws_expr(), lit(":"), ws_expr(), Expr::ref(value()), ws_expr()});
    b_.define(uint32_t(object_),
              Expr::seq({lit("{"), ws_expr(),
                         Expr::optional(
                             Expr::seq({pair, Expr::star(Expr::seq({lit(","), ws_expr(), pair}))})),
                         lit("}")}));
  }
  return uint32_t(object_);
}

uint32_t JsonRules::array() {
  if (array_ < 0) {
    array_ = b_.add_rule("array");
    const Expr item = Expr::seq({Expr::ref(value()), ws_expr()});
    b_.define(uint32_t(array_),
              Expr::seq({lit("["), ws_expr(),
                         Expr::optional(
                             Expr::seq({item, Expr::star(Expr::seq({lit(","), ws_expr(), item}))})),
                         lit("]")}));
  }
  return uint32_t(array_);
}

namespace {

std::string escape_code_point(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      return fmt::format("\\u{:04x}", cp);
  }
}

CodePointSet specials() { return CodePointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}); }

}  // namespace

Expr json_escape_content(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kBytes: {
      std::string out;
      for (char c : e.bytes) {
        const uint8_t b = uint8_t(c);
        if (b < 0x20 || b == '"' || b == '\\') {
          out += escape_code_point(b);
        } else {
          out += c;
        }
      }
      return Expr::literal(std::move(out));
    }
    case Expr::Kind::kCodePoints: {
      std::vector<Expr> alts;
      const CodePointSet special = specials();
      CodePointSet plain = e.code_points.minus(special);
      if (!plain.empty()) alts.push_back(Expr::chars(std::move(plain)));
      for (const CodePointRange& r : e.code_points.ranges()) {
        for (uint32_t cp = r.lo; cp <= std::min(r.hi, uint32_t('\\')); ++cp) {
          if (special.contains(cp)) alts.push_back(Expr::literal(escape_code_point(cp)));
        }
      }
      return Expr::choice(std::move(alts));
    }
    case Expr::Kind::kByteSet:
    case Expr::Kind::kRuleRef:
      return e;  // not produced by the regex parser
    default: {
      Expr out = e;
      for (Expr& item : out.items) item = json_escape_content(item);
      return out;
    }
  }
}

}  // namespace nanovllm::structured
