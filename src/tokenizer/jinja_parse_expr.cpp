// Expressions, by precedence as in jinja2: conditional < or < and < not < comparison
// < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and filters/tests.
#include <algorithm>
#include <vector>

#include "tokenizer/jinja_parser.h"

namespace nanovllm::jinja {
namespace {

ExprPtr make(Expr::Kind kind, int line) { return std::make_unique<Expr>(kind, line); }

ExprPtr make2(Expr::Kind kind, int line, ExprPtr a, ExprPtr b) {
  auto e = make(kind, line);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprPtr binary(std::string op, int line, ExprPtr a, ExprPtr b) {
  auto e = make2(Expr::Kind::Binary, line, std::move(a), std::move(b));
  e->name = std::move(op);
  return e;
}

}  // namespace

ExprPtr Parser::parse_expression(bool with_condexpr) {
  ExprPtr expr = parse_or();
  if (!with_condexpr) return expr;
  while (is_name("if")) {
    int line = next().line;
    auto e = make(Expr::Kind::CondExpr, line);
    e->args.push_back(parse_or());
    e->args.push_back(std::move(expr));
    e->args.push_back(skip_name("else") ? parse_expression() : nullptr);
    expr = std::move(e);
  }
  return expr;
}

bool Parser::is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
  const Token& t = cur();
  if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || t.type == TokenType::Eof) return true;
  if (t.type == TokenType::Op && (t.text == ")" || t.text == "]" || t.text == "}" || t.text == "=")) return true;
  return t.type == TokenType::Name && std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
}

ExprPtr Parser::parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end) {
  int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_condexpr));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (items.empty()) fail_here("expected an expression");
    return std::move(items[0]);
  }
  auto e = make(Expr::Kind::Tuple, line);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    int line = next().line;
    left = make2(Expr::Kind::Or, line, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    int line = next().line;
    left = make2(Expr::Kind::And, line, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    auto e = make(Expr::Kind::Not, next().line);
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  int line = cur().line;
  ExprPtr first = parse_math1();
  auto e = make(Expr::Kind::Compare, line);
  e->args.push_back(std::move(first));
  while (true) {
    static const char* const kOps[] = {"==", "!=", "<", "<=", ">", ">="};
    std::string op;
    if (cur().type == TokenType::Op && std::find(std::begin(kOps), std::end(kOps), cur().text) != std::end(kOps)) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    e->ops.push_back(op);
    e->args.push_back(parse_math1());
  }
  if (e->ops.empty()) return std::move(e->args[0]);
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    left = binary(t.text, t.line, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    int line = next().line;
    left = binary("~", line, std::move(left), parse_math2());
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    left = binary(t.text, t.line, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    int line = next().line;
    left = binary("**", line, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& t = next();
    node = make(t.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, t.line);
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  ExprPtr e;
  if (t.type == TokenType::Name) {
    e = make(Expr::Kind::Const, t.line);
    if (t.text == "true" || t.text == "True") e->value = Value(true);
    else if (t.text == "false" || t.text == "False") e->value = Value(false);
    else if (t.text == "none" || t.text == "None") e->value = Value(None{});
    else {
      e->kind = Expr::Kind::Name;
      e->name = t.text;
    }
    next();
  } else if (t.type == TokenType::String) {
    std::string s;
    int line = t.line;
    while (cur().type == TokenType::String) s += next().text;  // adjacent literals concatenate
    e = make(Expr::Kind::Const, line);
    e->value = Value(std::move(s));
  } else if (t.type == TokenType::Int || t.type == TokenType::Float) {
    e = make(Expr::Kind::Const, t.line);
    e->value = t.type == TokenType::Int ? Value(t.int_value) : Value(t.float_value);
    next();
  } else if (is_op("(")) {
    int line = next().line;
    if (skip_op(")")) {  // ()
      e = make(Expr::Kind::Tuple, line);
    } else {
      e = parse_tuple();
      expect_op(")");
    }
  } else if (is_op("[")) {
    e = make(Expr::Kind::List, next().line);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression());
    }
    expect_op("]");
  } else if (is_op("{")) {
    e = make(Expr::Kind::Dict, next().line);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression());
      expect_op(":");
      e->args.push_back(parse_expression());
    }
    expect_op("}");
  } else {
    fail_here("expected an expression");
  }
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      auto call = make(Expr::Kind::Call, cur().line);
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      auto call = make(Expr::Kind::Call, cur().line);
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.text == ".") {
    const Token& attr = next();
    if (attr.type == TokenType::Name) {
      auto e = make(Expr::Kind::GetAttr, t.line);
      e->args.push_back(std::move(node));
      e->name = attr.text;
      return e;
    }
    if (attr.type != TokenType::Int) fail_at(attr.line, "expected a name or number after '.'");
    auto index = make(Expr::Kind::Const, attr.line);
    index->value = Value(attr.int_value);
    return make2(Expr::Kind::GetItem, t.line, std::move(node), std::move(index));
  }
  // '[': one subscript or slice (a tuple of subscripts is not supported)
  ExprPtr arg = parse_subscribed();
  if (is_op(",")) fail_at(cur().line, "unsupported: tuple subscripts");
  expect_op("]");
  if (arg->kind == Expr::Kind::Slice) {
    arg->args.insert(arg->args.begin(), std::move(node));
    return arg;
  }
  return make2(Expr::Kind::GetItem, t.line, std::move(node), std::move(arg));
}

// A subscript expression or a slice [start]:[stop][:[step]]; a slice comes back as a Slice
// node whose args are {start, stop, step} (the object is inserted by the caller).
ExprPtr Parser::parse_subscribed() {
  int line = cur().line;
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression();
    if (!is_op(":")) return start;
  }
  next();  // ':'
  auto e = make(Expr::Kind::Slice, line);
  e->args.push_back(std::move(start));
  e->args.push_back(is_op(":") || is_op("]") || is_op(",") ? nullptr : parse_expression());
  if (skip_op(":")) e->args.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression());
  else e->args.push_back(nullptr);
  return e;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail_at(cur().line, "unsupported: *args / **kwargs in a call");
    if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(key, parse_expression());
    } else {
      if (!call.kwargs.empty()) fail_at(cur().line, "positional argument after a keyword argument");
      call.args.push_back(parse_expression());
    }
  }
  expect_op(")");
}

// `x|f|g(a)|h`: a loop, not a recursion per link (a chain as long as the template must not
// overflow the stack; check_names refuses it at kMaxExprDepth).
ExprPtr Parser::parse_filter(ExprPtr node) {
  do {
    const Token& bar = next();  // '|'
    auto e = make(Expr::Kind::Filter, bar.line);
    e->name = expect_name().text;
    while (skip_op(".")) e->name += "." + expect_name().text;
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    node = std::move(e);
  } while (is_op("|"));
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  auto e = make(Expr::Kind::Test, next().line);  // 'is'
  e->negated = skip_name("not");
  e->name = expect_name().text;
  while (skip_op(".")) e->name += "." + expect_name().text;
  e->args.push_back(std::move(node));
  const Token& t = cur();
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Int ||
              t.type == TokenType::Float || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail_at(t.line, "you cannot chain multiple tests with 'is'");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  return e;
}

Expr::~Expr() {
  // Children are detached into a worklist, so each is freed with no children of its own.
  std::vector<ExprPtr> pending;
  auto detach = [&pending](Expr& e) {
    for (auto& a : e.args)
      if (a) pending.push_back(std::move(a));
    for (auto& kv : e.kwargs)
      if (kv.second) pending.push_back(std::move(kv.second));
  };
  detach(*this);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    detach(*e);
  }
}

}  // namespace nanovllm::jinja
