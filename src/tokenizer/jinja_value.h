#pragma once
// The value model of the chat-template interpreter: the Python objects a Jinja template sees
// (undefined, None, bool, int, float, str, list/tuple, dict, namespace, callable), with
// Python's semantics for truthiness, ==, <, str() and repr(), and json.dumps for `tojson`.
// Strings are UTF-8; lengths, indices and slices count code points as Python does.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm::jinja {

class Value;

// A list (or tuple: printed with parentheses). Immutable once built, so shared freely.
struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // nesting (set by Value(List)): 1 + the deepest item's
};

// Lists, dicts and namespaces nest at most this deep (Error otherwise): everything that walks a
// value (str, ==, tojson, freeing it) recurses once per level.
constexpr int kMaxValueDepth = 256;
// Padding and indentation widths (center, ljust, rjust, indent, tojson indent) at most.
constexpr int64_t kMaxWidth = int64_t{1} << 20;

// An insertion-ordered dict (Python 3.7+ order) with any hashable-ish keys (str, int, ...).
// Also the attribute store of a `namespace()`, the one mutable object a template can make.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  void set(const Value& key, Value v);
  int depth = 1;  // nesting (set by Value(Dict); for a namespace's attrs, by assign_attr)
};

// Positional and keyword arguments of a call; `line` is the template line of the call.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
  // The argument named `name` or at position `index`, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Value(const Args&)> fn;
};

struct Undefined {
  std::string hint;  // why: "'x' is undefined", "'dict object' has no attribute 'y'"
};
struct None {};
struct Namespace {
  std::shared_ptr<Dict> attrs;
};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::shared_ptr<const std::string>,
                               std::shared_ptr<const List>, std::shared_ptr<const Dict>, Namespace,
                               std::shared_ptr<const Callable>>;

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(List l);  // Error when nested deeper than kMaxValueDepth
  Value(Dict d);
  Value(Namespace n) : v_(std::move(n)) {}
  Value(Callable c) : v_(std::make_shared<const Callable>(std::move(c))) {}
  static Value undefined(std::string hint) { Value v; v.v_ = Undefined{std::move(hint)}; return v; }

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }  // excludes bool
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::shared_ptr<const std::string>>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const Dict>>(v_); }
  bool is_namespace() const { return std::holds_alternative<Namespace>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }  // int only
  double as_float() const { return std::get<double>(v_); }
  const std::string& str() const { return *std::get<std::shared_ptr<const std::string>>(v_); }
  const List& list() const { return *std::get<std::shared_ptr<const List>>(v_); }
  const Dict& dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
  Dict& ns_attrs() const { return *std::get<Namespace>(v_).attrs; }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

  // bool and int as an integer (Python: bool is an int), for arithmetic and indexing.
  bool is_integral() const { return is_bool() || is_int(); }
  int64_t integral() const { return is_bool() ? int64_t{as_bool()} : as_int(); }
  double number() const;  // bool, int or float as a double

  // Python's type name: "str", "int", "dict", ... (for error messages).
  std::string type_name() const;
  bool truthy() const;
  // Nesting depth: 0 for scalars, 1 + the deepest element for lists, dicts and namespaces.
  int depth() const;

 private:
  Storage v_;
};

// Python semantics. Errors (TypeError in Python) throw nanovllm::Error with `what` context.
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b);  // <0, 0, >0; Error for unorderable types
std::string py_str(const Value& v);              // str(v); undefined prints as ""
std::string py_repr(const Value& v);             // repr(v)
std::string py_float_repr(double d);             // repr(float)

struct JsonOptions {
  std::optional<std::string> indent;  // none: one line with ", " and ": "
  bool sort_keys = false;
  bool ensure_ascii = false;  // true: non-ASCII as \uXXXX escapes
  std::string item_sep = ", ", key_sep = ": ";
};
std::string to_json(const Value& v, const JsonOptions& opt);  // json.dumps(v, ...) with these options

Value from_json(const nlohmann::ordered_json& j);

// UTF-8 helpers (code point based, as Python str).
uint32_t utf8_decode(std::string_view s, size_t& i);  // one code point at s[i]; advances i
void utf8_append(std::string& out, uint32_t cp);
std::vector<std::string_view> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);
bool py_isspace(uint32_t cp);

}  // namespace nanovllm::jinja
