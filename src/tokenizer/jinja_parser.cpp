// Statements: {% for %}, {% if %}, {% set %}, {% macro %}, break/continue, {% generation %}.
#include "tokenizer/jinja_parser.h"

#include <algorithm>

namespace nanovllm::jinja {

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::Data: return "template data";
    case TokenType::VarBegin: return "'{{'";
    case TokenType::VarEnd: return "'}}'";
    case TokenType::BlockBegin: return "'{%'";
    case TokenType::BlockEnd: return "'%}'";
    case TokenType::Eof: return "end of template";
    case TokenType::String: return "string literal";
    default: return "'" + t.text + "'";
  }
}

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse_all(); }

void Parser::fail_here(std::string_view what) const { fail_at(cur().line, "{}, got {}", what, describe(cur())); }

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

const Token& Parser::expect_op(std::string_view op) {
  if (!is_op(op)) fail_here(fmt::format("expected '{}'", op));
  return next();
}

const Token& Parser::expect_name(std::string_view name) {
  if (cur().type != TokenType::Name || (!name.empty() && cur().text != name))
    fail_here(name.empty() ? std::string("expected a name") : fmt::format("expected '{}'", name));
  return next();
}

const Token& Parser::expect(TokenType type, std::string_view what) {
  if (cur().type != type) fail_here(fmt::format("expected {}", what));
  return next();
}

Body Parser::parse_all() {
  Body body = subparse({});
  if (cur().type != TokenType::Eof) fail_here("unexpected tag");
  return body;
}

// Text, {{ }} and statements until a {% name %} with a name in end_names (left as the current
// token) or the end of the template.
Body Parser::subparse(std::initializer_list<std::string_view> end_names) {
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == TokenType::Data) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Text, t.line);
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == TokenType::VarBegin) {
      next();
      auto s = std::make_unique<Stmt>(Stmt::Kind::Print, t.line);
      s->expr = parse_tuple();
      expect(TokenType::VarEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.type == TokenType::BlockBegin) {
      next();
      if (cur().type == TokenType::Name &&
          std::find(end_names.begin(), end_names.end(), cur().text) != end_names.end())
        return body;
      body.push_back(parse_statement());
      expect(TokenType::BlockEnd, "'%}'");
    } else if (t.type == TokenType::Eof) {
      if (end_names.size()) {
        std::string names;
        for (auto n : end_names) names += (names.empty() ? "'" : ", '") + std::string(n) + "'";
        fail_at(t.line, "unexpected end of template: an unclosed block expects one of {}", names);
      }
      return body;
    } else {
      fail_here("unexpected token");
    }
  }
}

Body Parser::parse_statements(std::initializer_list<std::string_view> end_names, bool drop_needle) {
  skip_op(":");
  expect(TokenType::BlockEnd, "'%}'");
  Body body = subparse(end_names);
  if (drop_needle) next();
  return body;
}

StmtPtr Parser::parse_statement() {
  DepthGuard guard(*this);
  const Token& t = cur();
  if (t.type != TokenType::Name) fail_here("expected a tag name");
  int line = t.line;
  const std::string& name = t.text;
  if (name == "for") return parse_for();
  if (name == "if") return parse_if();
  if (name == "set") return parse_set();
  if (name == "macro") return parse_macro();
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail_at(line, "'{}' outside of a for loop", name);
    next();
    return std::make_unique<Stmt>(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
  }
  if (name == "generation") {  // transformers' AssistantTracker tag: renders its body
    next();
    auto s = std::make_unique<Stmt>(Stmt::Kind::Scope, line);
    s->bodies.push_back(parse_statements({"endgeneration"}, true));
    return s;
  }
  static const char* const kEnds[] = {"endfor", "endif", "elif", "else", "endset", "endmacro", "endgeneration"};
  for (const char* e : kEnds)
    if (name == e) fail_at(line, "unexpected '{}' (no block to close)", name);
  fail_at(line, "unsupported tag '{}'", name);
}

Target Parser::parse_target(bool with_namespace, std::string_view end_name) {
  Target target;
  if (with_namespace && cur().type == TokenType::Name && peek().type == TokenType::Op && peek().text == ".") {
    target.names.push_back(next().text);
    next();
    target.attr = expect_name().text;
    return target;
  }
  bool paren = skip_op("(");
  while (true) {
    target.names.push_back(expect_name().text);
    if (!skip_op(",")) break;
    target.is_tuple = true;
    if ((paren && is_op(")")) || (!paren && (is_name(end_name) || is_op("=")))) break;
  }
  if (paren) expect_op(")");
  for (const auto& n : target.names)
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      fail_at(cur().line, "cannot assign to '{}'", n);
  return target;
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::For, next().line);
  s->target = parse_target(false, "in");
  expect_name("in");
  s->expr = parse_tuple(false, {"recursive"});
  s->conds.push_back(skip_name("if") ? parse_expression() : nullptr);
  if (is_name("recursive")) fail_at(cur().line, "unsupported: recursive for loops");
  ++loop_depth_;
  s->bodies.push_back(parse_statements({"endfor", "else"}, false));
  --loop_depth_;
  if (next().text == "else") s->bodies.push_back(parse_statements({"endfor"}, true));
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::If, next().line);
  while (true) {
    s->conds.push_back(parse_tuple(false));
    s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
    const Token& t = next();
    if (t.text == "elif") continue;
    if (t.text == "else") s->bodies.push_back(parse_statements({"endif"}, true));
    return s;
  }
}

StmtPtr Parser::parse_set() {
  int line = next().line;
  Target target = parse_target(true, "");
  if (skip_op("=")) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
    s->target = std::move(target);
    s->expr = parse_tuple();
    return s;
  }
  if (is_op("|")) fail_at(line, "unsupported: filtered block set");
  if (!target.attr.empty() || target.is_tuple) fail_at(line, "a block set needs a single name");
  auto s = std::make_unique<Stmt>(Stmt::Kind::SetBlock, line);
  s->target = std::move(target);
  s->bodies.push_back(parse_statements({"endset"}, true));
  return s;
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, next().line);
  s->text = expect_name().text;
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (is_op(")")) break;
    s->params.push_back(expect_name().text);
    s->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
  }
  expect_op(")");
  int saved = loop_depth_;
  loop_depth_ = 0;
  s->bodies.push_back(parse_statements({"endmacro"}, true));
  loop_depth_ = saved;
  return s;
}

}  // namespace nanovllm::jinja
