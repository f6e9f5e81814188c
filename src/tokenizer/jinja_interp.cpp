#include "tokenizer/jinja_interp.h"

#include <algorithm>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lexer.h"

namespace nanovllm::jinja {
namespace {

constexpr int kMaxCallDepth = 100;  // macro recursion limit (keeps the C++ stack small)
constexpr int kMaxNamespaces = 4096;  // namespace() calls in one render

// Variables of one scope; lookups fall through to the parent.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  Frame* parent = nullptr;

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent)
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { Normal, Break, Continue };

[[noreturn]] void undefined_error(const Value& v) {
  throw Error(v.undefined_hint().empty() ? std::string("value is undefined") : v.undefined_hint());
}

class Interpreter {
 public:
  Interpreter(std::string* out, Frame* root, const RenderLimits& limits)
      : out_(out), root_(root), limits_(limits) {}

  Flow exec(const Body& body, Frame& frame) {
    for (const auto& stmt : body) {
      Flow flow;
      try {
        flow = exec_one(*stmt, frame);
      } catch (const RaisedError&) {
        throw;
      } catch (const LocatedError&) {
        throw;
      } catch (const Error& e) {
        throw LocatedError(fmt::format("chat template line {}: {}", stmt->line, e.what()));
      }
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

 private:
  Flow exec_one(const Stmt& s, Frame& frame);
  void exec_for(const Stmt& s, Frame& frame);
  void assign(const Target& t, Value v, Frame& frame);
  bool reaches(const Value& v, const Dict* target, std::vector<const void*>& seen);
  Value make_macro(const Stmt& s);
  Value eval(const Expr& e, Frame& frame);       // eval_node within the limits
  Value eval_node(const Expr& e, Frame& frame);
  Value eval_compare(const Expr& e, Frame& frame);
  Args eval_args(const Expr& e, Frame& frame, size_t first);

  // One step more and one level deeper for its lifetime; Error past the limits.
  struct StepGuard {
    Interpreter& in;
    explicit StepGuard(Interpreter& i) : in(i) {
      if (++in.steps_ > in.limits_.max_steps)
        fail("the template ran more than {} steps (render limit max_steps)", in.limits_.max_steps);
      if (++in.nesting_ > in.limits_.max_depth)
        fail("the template nests deeper than {} levels (render limit max_depth)", in.limits_.max_depth);
    }
    ~StepGuard() { --in.nesting_; }
  };
  // Error when a string built by the render is longer than max_output_bytes.
  void check_size(size_t bytes) const {
    if (int64_t(bytes) > limits_.max_output_bytes)
      fail("the template builds a string longer than {} bytes (render limit max_output_bytes)",
           limits_.max_output_bytes);
  }
  void emit(const std::string& text) {
    check_size(out_->size() + text.size());
    *out_ += text;
  }

  std::string* out_;
  Frame* root_;  // the template's top-level variables
  const RenderLimits& limits_;
  int depth_ = 0;    // macro calls in progress
  int nesting_ = 0;  // exec_one / eval calls in progress
  int64_t steps_ = 0;
};

Flow Interpreter::exec_one(const Stmt& s, Frame& frame) {
  StepGuard guard(*this);
  switch (s.kind) {
    case Stmt::Kind::Text: emit(s.text); return Flow::Normal;
    case Stmt::Kind::Print: emit(py_str(eval(*s.expr, frame))); return Flow::Normal;
    case Stmt::Kind::If:
      for (size_t i = 0; i < s.conds.size(); ++i)
        if (eval(*s.conds[i], frame).truthy()) return exec(s.bodies[i], frame);
      if (s.bodies.size() > s.conds.size()) return exec(s.bodies.back(), frame);
      return Flow::Normal;
    case Stmt::Kind::For: exec_for(s, frame); return Flow::Normal;
    case Stmt::Kind::Set: assign(s.target, eval(*s.expr, frame), frame); return Flow::Normal;
    case Stmt::Kind::SetBlock: {
      std::string captured;
      std::string* saved = out_;
      out_ = &captured;
      Flow flow = exec(s.bodies[0], frame);
      out_ = saved;
      assign(s.target, Value(std::move(captured)), frame);
      return flow;
    }
    case Stmt::Kind::Macro: frame.set(s.text, make_macro(s)); return Flow::Normal;
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
    case Stmt::Kind::Scope: return exec(s.bodies[0], frame);
  }
  return Flow::Normal;
}

// Whether `v` is or contains (through lists, dicts and namespaces) the namespace whose attributes
// are `target`. `seen`: containers walked already (a value may share sublists); each counts a step.
bool Interpreter::reaches(const Value& v, const Dict* target, std::vector<const void*>& seen) {
  const void* id = v.is_list() ? static_cast<const void*>(&v.list())
                   : v.is_dict() ? static_cast<const void*>(&v.dict())
                   : v.is_namespace() ? static_cast<const void*>(&v.ns_attrs())
                                      : nullptr;
  if (!id) return false;
  if (id == target) return true;
  if (std::find(seen.begin(), seen.end(), id) != seen.end()) return false;
  seen.push_back(id);
  StepGuard guard(*this);
  if (v.is_list()) {
    for (const Value& x : v.list().items)
      if (reaches(x, target, seen)) return true;
    return false;
  }
  for (const auto& [k, x] : (v.is_dict() ? v.dict() : v.ns_attrs()).items)
    if (reaches(x, target, seen)) return true;
  return false;
}

void Interpreter::assign(const Target& t, Value v, Frame& frame) {
  if (!t.attr.empty()) {
    const Value* ns = frame.find(t.names[0]);
    if (!ns || !ns->is_namespace()) throw Error("cannot assign attribute on non-namespace object");
    Dict& attrs = ns->ns_attrs();
    // A namespace is the one mutable object: it must not come to hold itself (str() of it would
    // never end, and it would never be freed).
    std::vector<const void*> seen;
    if (reaches(v, &attrs, seen)) throw Error("a namespace cannot hold itself, directly or nested");
    attrs.depth = std::max(attrs.depth, v.depth() + 1);
    if (attrs.depth > kMaxValueDepth) fail("value nested deeper than {} levels", kMaxValueDepth);
    attrs.set(Value(t.attr), std::move(v));
    return;
  }
  if (!t.is_tuple) {
    frame.set(t.names[0], std::move(v));
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != t.names.size())
    fail("cannot unpack {} values into {} names", items.size(), t.names.size());
  for (size_t i = 0; i < items.size(); ++i) frame.set(t.names[i], std::move(items[i]));
}

void Interpreter::exec_for(const Stmt& s, Frame& frame) {
  std::vector<Value> items = iterate(eval(*s.expr, frame));
  if (s.conds[0]) {  // `for x in xs if cond`: filter first, so loop.length counts what is kept
    std::vector<Value> kept;
    for (auto& item : items) {
      Frame f{{}, &frame};
      assign(s.target, item, f);
      if (eval(*s.conds[0], f).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    StepGuard step(*this);  // an iteration is a step, even with an empty body
    Frame f{{}, &frame};
    Dict loop;
    auto put = [&](const char* k, Value v) { loop.items.emplace_back(Value(k), std::move(v)); };
    put("index", i + 1);
    put("index0", i);
    put("revindex", n - i);
    put("revindex0", n - i - 1);
    put("first", i == 0);
    put("last", i == n - 1);
    put("length", n);
    put("depth", 1);
    put("depth0", 0);
    if (i > 0) put("previtem", items[i - 1]);
    if (i + 1 < n) put("nextitem", items[i + 1]);
    put("cycle", Callable{"loop.cycle", [i](const Args& a) {
                            if (a.pos.empty()) throw Error("loop.cycle: no items given");
                            return a.pos[static_cast<size_t>(i) % a.pos.size()];
                          }});
    f.vars.emplace_back("loop", Value(std::move(loop)));
    assign(s.target, items[i], f);
    if (exec(s.bodies[0], f) == Flow::Break) break;
  }
  if (n == 0 && s.bodies.size() > 1) {
    Frame f{{}, &frame};
    exec(s.bodies[1], f);
  }
}

// A macro's body sees its arguments and the template's top-level variables (the root frame
// lives for the whole render, so a macro stored away and called later is still safe).
Value Interpreter::make_macro(const Stmt& s) {
  const Stmt* def = &s;
  Frame* scope = root_;
  return Value(Callable{s.text, [this, def, scope](const Args& args) -> Value {
    if (args.pos.size() > def->params.size()) fail("macro '{}' takes at most {} arguments", def->text, def->params.size());
    Frame f{{}, scope};
    for (size_t i = 0; i < def->params.size(); ++i) {
      const Value* given = args.get(i, def->params[i]);
      if (given) f.set(def->params[i], *given);
      else if (def->defaults[i]) f.set(def->params[i], eval(*def->defaults[i], f));
      else f.set(def->params[i], Value::undefined("'" + def->params[i] + "' is undefined"));
    }
    for (const auto& [k, v] : args.kw)
      if (std::find(def->params.begin(), def->params.end(), k) == def->params.end())
        fail("macro '{}' takes no keyword argument '{}'", def->text, k);
    if (depth_ >= kMaxCallDepth) fail("macro recursion deeper than {}", kMaxCallDepth);
    std::string result;
    std::string* saved = out_;
    out_ = &result;
    ++depth_;
    try {
      exec(def->bodies[0], f);
    } catch (...) {
      out_ = saved;
      --depth_;
      throw;
    }
    out_ = saved;
    --depth_;
    return Value(std::move(result));
  }});
}

Args Interpreter::eval_args(const Expr& e, Frame& frame, size_t first) {
  Args args;
  args.line = e.line;
  for (size_t i = first; i < e.args.size(); ++i) args.pos.push_back(eval(*e.args[i], frame));
  for (const auto& [k, v] : e.kwargs) args.kw.emplace_back(k, eval(*v, frame));
  return args;
}

Value Interpreter::eval(const Expr& e, Frame& frame) {
  StepGuard guard(*this);
  Value v = eval_node(e, frame);
  if (v.is_string()) check_size(v.str().size());
  return v;
}

Value Interpreter::eval_node(const Expr& e, Frame& frame) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::Const: return e.value;
    case K::Name: {
      const Value* v = frame.find(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case K::List:
    case K::Tuple: {
      List l;
      l.is_tuple = e.kind == K::Tuple;
      for (const auto& a : e.args) l.items.push_back(eval(*a, frame));
      return Value(std::move(l));
    }
    case K::Dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) d.set(eval(*e.args[i], frame), eval(*e.args[i + 1], frame));
      return Value(std::move(d));
    }
    case K::GetAttr: {
      Value obj = eval(*e.args[0], frame);
      if (obj.is_undefined()) undefined_error(obj);
      return get_attr(obj, e.name);
    }
    case K::GetItem: {
      Value obj = eval(*e.args[0], frame);
      if (obj.is_undefined()) undefined_error(obj);
      return get_item(obj, eval(*e.args[1], frame));
    }
    case K::Slice: {
      Value obj = eval(*e.args[0], frame);
      if (obj.is_undefined()) undefined_error(obj);
      auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], frame) : Value(None{}); };
      return get_slice(obj, part(1), part(2), part(3));
    }
    case K::Call: {
      Value fn = eval(*e.args[0], frame);
      if (fn.is_undefined()) undefined_error(fn);
      return call(fn, eval_args(e, frame, 1));
    }
    case K::Filter: return apply_filter(e.name, eval(*e.args[0], frame), eval_args(e, frame, 1));
    case K::Test: {
      bool r = apply_test(e.name, eval(*e.args[0], frame), eval_args(e, frame, 1));
      return Value(r != e.negated);
    }
    case K::Neg:
    case K::Pos: {
      Value v = eval(*e.args[0], frame);
      if (v.is_undefined()) undefined_error(v);
      if (v.is_float()) return Value(e.kind == K::Neg ? -v.as_float() : v.as_float());
      if (!v.is_integral()) fail("bad operand type for unary {}: '{}'", e.kind == K::Neg ? '-' : '+', v.type_name());
      if (e.kind == K::Pos) return Value(v.integral());
      if (v.integral() == INT64_MIN) throw Error("integer overflow");
      return Value(-v.integral());
    }
    case K::Not: return Value(!eval(*e.args[0], frame).truthy());
    case K::And: {
      Value a = eval(*e.args[0], frame);
      return a.truthy() ? eval(*e.args[1], frame) : a;
    }
    case K::Or: {
      Value a = eval(*e.args[0], frame);
      return a.truthy() ? a : eval(*e.args[1], frame);
    }
    case K::Binary: {
      Value a = eval(*e.args[0], frame);
      Value b = eval(*e.args[1], frame);
      if (e.name == "~") return Value(py_str(a) + py_str(b));
      if (a.is_undefined()) undefined_error(a);
      if (b.is_undefined()) undefined_error(b);
      return binary_op(e.name, a, b);
    }
    case K::Compare: return eval_compare(e, frame);
    case K::CondExpr: {
      if (eval(*e.args[0], frame).truthy()) return eval(*e.args[1], frame);
      if (e.args[2]) return eval(*e.args[2], frame);
      return Value::undefined(fmt::format("the inline if-expression on line {} evaluated to false and no else section was defined", e.line));
    }
  }
  return Value();
}

Value Interpreter::eval_compare(const Expr& e, Frame& frame) {
  Value left = eval(*e.args[0], frame);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], frame);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") r = py_equal(left, right);
    else if (op == "!=") r = !py_equal(left, right);
    else if (op == "in") r = contains(right, left);
    else if (op == "notin") r = !contains(right, left);
    else {
      if (left.is_undefined()) undefined_error(left);
      if (right.is_undefined()) undefined_error(right);
      int c = py_compare(left, right);
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

// Expressions nested deeper than this are refused when the template is parsed (the parser
// bounds its own recursion, but a chain such as `a ~ b ~ c ...` or `x|f|f ...` is built in a
// loop, one level per link). Rendering them would nest as deep.
constexpr int kMaxExprDepth = 400;

void check_expr(const Expr& e, int depth) {
  if (depth > kMaxExprDepth) fail_at(e.line, "expression nested deeper than {} levels", kMaxExprDepth);
  if (e.kind == Expr::Kind::Filter && !has_filter(e.name)) fail_at(e.line, "unsupported filter '{}'", e.name);
  if (e.kind == Expr::Kind::Test && !has_test(e.name)) fail_at(e.line, "unsupported test '{}'", e.name);
  for (const auto& a : e.args)
    if (a) check_expr(*a, depth + 1);
  for (const auto& [k, v] : e.kwargs) check_expr(*v, depth + 1);
}

}  // namespace

void check_names(const Body& program) {
  for (const auto& s : program) {
    if (s->expr) check_expr(*s->expr, 1);
    for (const auto& c : s->conds)
      if (c) check_expr(*c, 1);
    for (const auto& d : s->defaults)
      if (d) check_expr(*d, 1);
    for (const auto& b : s->bodies) check_names(b);
  }
}

std::string render(const Body& program, std::vector<std::pair<std::string, Value>> vars,
                   const RenderLimits& limits) {
  // namespace(): at most kMaxNamespaces per render. Namespaces can be chained through their
  // attributes from the inside out, past what assign's depth bookkeeping sees, and freeing a
  // chain recurses once per link.
  int namespaces = 0;
  Frame globals{make_globals(), nullptr};
  for (auto& [name, v] : globals.vars)
    if (name == "namespace") {
      Value make = v;
      v = Value(Callable{"namespace", [make, &namespaces](const Args& a) {
                           if (++namespaces > kMaxNamespaces)
                             fail("the template makes more than {} namespaces", kMaxNamespaces);
                           return call(make, a);
                         }});
    }
  Frame root{std::move(vars), &globals};
  std::string out;
  Interpreter interp(&out, &root, limits);
  interp.exec(program, root);
  return out;
}

}  // namespace nanovllm::jinja
