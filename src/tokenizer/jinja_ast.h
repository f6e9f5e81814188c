#pragma once
// The chat-template syntax tree: expressions and statements, each with its template line.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace nanovllm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Const,     // value
    Name,      // name
    List,      // args: items
    Tuple,     // args: items
    Dict,      // args: key0, value0, key1, value1, ...
    GetAttr,   // args[0].name
    GetItem,   // args[0][args[1]]
    Slice,     // args[0][args[1]:args[2]:args[3]] (absent parts are null)
    Call,      // args[0](args[1:], kwargs)
    Filter,    // args[0] | name(args[1:], kwargs)
    Test,      // args[0] is [not: negated] name(args[1:], kwargs)
    Neg,       // -args[0]
    Pos,       // +args[0]
    Not,       // not args[0]
    And,       // args[0] and args[1]
    Or,        // args[0] or args[1]
    Binary,    // args[0] op args[1]; op in + - * / // % ** ~
    Compare,   // args[0] ops[0] args[1] ops[1] args[2] ...; ops in == != < <= > >= in notin
    CondExpr,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;                    // Const
  std::string name;               // Name, GetAttr, Filter, Test; Binary: the operator
  std::vector<ExprPtr> args;      // operands, see Kind
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call, Filter, Test
  std::vector<std::string> ops;   // Compare
  bool negated = false;           // Test

  Expr(Kind k, int l) : kind(k), line(l) {}
  // Iterative: a left-leaning chain (`a ~ b ~ c ...`, `x|f|f|f ...`) as deep as the template is
  // long must not overflow the stack when freed (jinja_parse_expr.cpp).
  ~Expr();
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// An assignment target: a name, a tuple of names (unpacking), or `ns.attr`.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  bool is_tuple = false;
  std::string attr;  // non-empty: names[0].attr (namespace attribute)
};

struct Stmt {
  enum class Kind {
    Text,      // text
    Print,     // {{ expr }}
    If,        // conds[i] -> bodies[i]; bodies.size() == conds.size() + 1 when there is an else
    For,       // for target in expr [if conds[0]]: bodies[0]; else: bodies[1]
    Set,       // set target = expr
    SetBlock,  // set target %}bodies[0]{% endset (optionally filtered: filter)
    Macro,     // macro name(params = defaults): bodies[0]
    Break,
    Continue,
    Scope,     // bodies[0] rendered as is ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;                // Text; Macro: its name
  ExprPtr expr;                    // Print, For (iterable), Set (value), SetBlock (filter, may be null)
  Target target;                   // For, Set, SetBlock
  std::vector<ExprPtr> conds;      // If; For: filter condition (null when none)
  std::vector<Body> bodies;
  std::vector<std::string> params;     // Macro
  std::vector<ExprPtr> defaults;       // Macro: one per param, null when none

  Stmt(Kind k, int l) : kind(k), line(l) {}
};

}  // namespace nanovllm::jinja
