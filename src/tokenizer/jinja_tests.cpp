// jinja2's built-in tests (`x is defined`, ...) and the globals transformers gives a chat
// template: range, namespace, dict, raise_exception, strftime_now.
#include <ctime>
#include <unordered_map>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"

namespace nanovllm::jinja {
namespace {

using TestFn = bool (*)(const Value&, const Args&);

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE

const Value& operand(const Args& a, const char* test) {
  if (a.pos.size() != 1 || !a.kw.empty()) fail("test '{}' takes one argument", test);
  return a.pos[0];
}

template <bool (*Pred)(const Value&)>
bool unary(const Value& v, const Args& a) {
  if (!a.pos.empty() || !a.kw.empty()) throw Error("this test takes no arguments");
  return Pred(v);
}

bool is_defined(const Value& v) { return !v.is_undefined(); }
bool is_undefined(const Value& v) { return v.is_undefined(); }
bool is_none(const Value& v) { return v.is_none(); }
bool is_boolean(const Value& v) { return v.is_bool(); }
bool is_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool is_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool is_integer(const Value& v) { return v.is_int(); }
bool is_float(const Value& v) { return v.is_float(); }
bool is_number(const Value& v) { return v.is_number(); }
bool is_string(const Value& v) { return v.is_string(); }
bool is_mapping(const Value& v) { return v.is_dict(); }
bool is_iterable(const Value& v) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }
bool is_callable(const Value& v) { return v.is_callable(); }
bool is_lower(const Value& v) { return py_str(v) == py_case(py_str(v), "lower") && py_str(v) != py_case(py_str(v), "upper"); }
bool is_upper(const Value& v) { return py_str(v) == py_case(py_str(v), "upper") && py_str(v) != py_case(py_str(v), "lower"); }
bool is_odd(const Value& v) { return py_equal(binary_op("%", v, Value(2)), Value(1)); }
bool is_even(const Value& v) { return py_equal(binary_op("%", v, Value(2)), Value(0)); }

bool t_eq(const Value& v, const Args& a) { return py_equal(v, operand(a, "eq")); }
bool t_ne(const Value& v, const Args& a) { return !py_equal(v, operand(a, "ne")); }
bool t_lt(const Value& v, const Args& a) { return py_compare(v, operand(a, "lt")) < 0; }
bool t_le(const Value& v, const Args& a) { return py_compare(v, operand(a, "le")) <= 0; }
bool t_gt(const Value& v, const Args& a) { return py_compare(v, operand(a, "gt")) > 0; }
bool t_ge(const Value& v, const Args& a) { return py_compare(v, operand(a, "ge")) >= 0; }
bool t_in(const Value& v, const Args& a) { return contains(operand(a, "in"), v); }
bool t_divisibleby(const Value& v, const Args& a) {
  Value m = binary_op("%", v, operand(a, "divisibleby"));
  return m.number() == 0;
}
bool t_sameas(const Value& v, const Args& a) {  // identity, as far as values can tell
  const Value& o = operand(a, "sameas");
  return v.type_name() == o.type_name() && py_equal(v, o);
}
bool is_filter_name(const Value& v) { return v.is_string() && has_filter(v.str()); }
bool is_test_name(const Value& v);
bool t_sequence(const Value& v, const Args& a) { return unary<is_iterable>(v, a); }  // len() and [] both work

const std::unordered_map<std::string, TestFn>& tests();
bool is_test_name(const Value& v) { return v.is_string() && tests().count(v.str()) > 0; }

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"defined", unary<is_defined>},   {"undefined", unary<is_undefined>}, {"none", unary<is_none>},
      {"boolean", unary<is_boolean>},   {"true", unary<is_true>},           {"false", unary<is_false>},
      {"integer", unary<is_integer>},   {"float", unary<is_float>},         {"number", unary<is_number>},
      {"string", unary<is_string>},     {"mapping", unary<is_mapping>},     {"iterable", unary<is_iterable>},
      {"sequence", t_sequence},         {"callable", unary<is_callable>},   {"lower", unary<is_lower>},
      {"upper", unary<is_upper>},       {"odd", unary<is_odd>},             {"even", unary<is_even>},
      {"eq", t_eq},  {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt},
      {"lessthan", t_lt}, {"<", t_lt},  {"le", t_le}, {"<=", t_le}, {"gt", t_gt}, {"greaterthan", t_gt},
      {">", t_gt},   {"ge", t_ge}, {">=", t_ge}, {"in", t_in}, {"divisibleby", t_divisibleby},
      {"sameas", t_sameas}, {"filter", unary<is_filter_name>}, {"test", unary<is_test_name>},
  };
  return table;
}

Value g_range(const Args& a) {
  check_args(a, "range", 3, {});
  if (a.pos.empty()) throw Error("range expected at least 1 argument, got 0");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = int_arg(a.pos[0], "range argument");
  } else {
    start = int_arg(a.pos[0], "range argument");
    stop = int_arg(a.pos[1], "range argument");
    if (a.pos.size() > 2) step = int_arg(a.pos[2], "range argument");
  }
  if (step == 0) throw Error("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.items.size()) >= kMaxRange)
      fail("range too big: the sandbox blocks ranges larger than {}", kMaxRange);
    out.items.emplace_back(i);
  }
  return Value(std::move(out));
}

// dict(*args, **kwargs) as Python: positional mappings or pairs first, then keywords.
Dict make_dict(const Args& a, const char* what) {
  if (a.pos.size() > 1) fail("{} expected at most 1 positional argument", what);
  Dict d;
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      for (const auto& pair : iterate(src)) {
        auto kv = iterate(pair);
        if (kv.size() != 2) fail("{}: sequence elements must have length 2", what);
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kw) d.set(Value(k), v);
  return d;
}

Value g_namespace(const Args& a) { return Value(Namespace{std::make_shared<Dict>(make_dict(a, "namespace"))}); }
Value g_dict(const Args& a) { return Value(make_dict(a, "dict")); }

Value g_raise_exception(const Args& a) {
  check_args(a, "raise_exception", 1, {"message"});
  const Value* msg = a.get(0, "message");
  throw RaisedError(msg ? py_str(*msg) : std::string("raise_exception() called"));
}

Value g_strftime_now(const Args& a) {
  check_args(a, "strftime_now", 1, {"format"});
  const Value* f = a.get(0, "format");
  std::string format = str_arg(f ? *f : Value(), "strftime_now format");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
  return Value(std::string(buf, n));
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool apply_test(const std::string& name, const Value& v, const Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail("no test named '{}'", name);
  return it->second(v, args);
}

std::vector<std::pair<std::string, Value>> make_globals() {
  return {
      {"range", Value(Callable{"range", g_range})},
      {"namespace", Value(Callable{"namespace", g_namespace})},
      {"dict", Value(Callable{"dict", g_dict})},
      {"raise_exception", Value(Callable{"raise_exception", g_raise_exception})},
      {"strftime_now", Value(Callable{"strftime_now", g_strftime_now})},
  };
}

}  // namespace nanovllm::jinja
