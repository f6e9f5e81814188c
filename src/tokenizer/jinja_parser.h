#pragma once
// The chat-template parser: tokens -> syntax tree, following jinja2's grammar (statements in
// jinja_parser.cpp, expressions in jinja_parse_expr.cpp). Unsupported syntax is an Error
// naming the template line.
#include <initializer_list>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace nanovllm::jinja {

// Parses a whole template.
Body parse_template(std::string_view source);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}
  Body parse_all();

  // Expressions (jinja_parse_expr.cpp).
  ExprPtr parse_expression(bool with_condexpr = true);
  // A comma-separated tuple, or one expression when there is no comma.
  ExprPtr parse_tuple(bool with_condexpr = true, std::initializer_list<std::string_view> extra_end = {});

 private:
  // Statements.
  Body subparse(std::initializer_list<std::string_view> end_names);
  Body parse_statements(std::initializer_list<std::string_view> end_names, bool drop_needle);
  StmtPtr parse_statement();
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  Target parse_target(bool with_namespace, std::string_view end_name);

  // Expressions.
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);
  void parse_call_args(Expr& call);
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const;

  // Token stream.
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Op && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().type == TokenType::Name && cur().text == name; }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  const Token& expect_op(std::string_view op);
  const Token& expect_name(std::string_view name = {});
  const Token& expect(TokenType type, std::string_view what);
  [[noreturn]] void fail_here(std::string_view what) const;

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;  // break/continue are allowed inside a for body only
  int depth_ = 0;       // nesting of expressions and blocks, bounded to keep the stack safe

  // Counts one level of nesting for its lifetime; Error past kMaxDepth.
  struct DepthGuard {
    static constexpr int kMaxDepth = 200;
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) fail_at(p.cur().line, "template nested deeper than {} levels", kMaxDepth);
    }
    ~DepthGuard() { --p.depth_; }
  };
};

std::string describe(const Token& t);

}  // namespace nanovllm::jinja
