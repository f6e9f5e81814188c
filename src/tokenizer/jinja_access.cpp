// Attribute, item and slice access with jinja2's sandboxed lookup rules; iteration and `in`.
#include <algorithm>

#include "tokenizer/jinja_builtins.h"

namespace nanovllm::jinja {

// Bound methods of str, dict and list (jinja_methods.cpp).
bool is_method(const Value& obj, const std::string& name);
Value call_method(const Value& obj, const std::string& name, const Args& args);

namespace {

std::string object_name(const Value& v) {
  if (v.is_none()) return "None";
  return v.type_name() + " object";
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Python's slice.indices(n) followed by the walk: the selected positions.
std::vector<int64_t> slice_positions(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_integral()) fail("slice {} must be an integer or none, not {}", what, v.type_name());
    return v.integral();
  };
  int64_t st = bound(step, "step").value_or(1);
  if (st == 0) throw Error("slice step cannot be zero");
  const int64_t lower = st < 0 ? -1 : 0, upper = st < 0 ? n - 1 : n;
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    if (*v < 0) return std::max(*v + n, lower);
    return std::min(*v, upper);
  };
  int64_t b = adjust(bound(start, "start"), st < 0 ? upper : lower);
  int64_t e = adjust(bound(stop, "stop"), st < 0 ? lower : upper);
  std::vector<int64_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(i);
  return out;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_namespace()) {
    if (const Value* v = obj.ns_attrs().find(name)) return *v;
  } else if (is_method(obj, name)) {
    Value self = obj;
    return Value(Callable{name, [self, name](const Args& args) { return call_method(self, name, args); }});
  } else if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_name(obj), name));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_list() && key.is_integral()) {
    const auto& items = obj.list().items;
    int64_t n = static_cast<int64_t>(items.size()), i = key.integral();
    if (i < 0) i += n;
    if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    return Value::undefined(fmt::format("'{}' has no element {}", object_name(obj), key.integral()));
  }
  if (obj.is_string() && key.is_integral()) {
    const std::string& s = obj.str();
    int64_t i = key.integral();
    if (is_ascii(s)) {
      int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(std::string(1, s[static_cast<size_t>(i)]));
    } else {
      auto chars = utf8_chars(s);
      int64_t n = static_cast<int64_t>(chars.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(std::string(chars[static_cast<size_t>(i)]));
    }
    return Value::undefined(fmt::format("'{}' has no element {}", object_name(obj), key.integral()));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(key)) return *v;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(fmt::format("'{}' has no element {}", object_name(obj), py_repr(key)));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_list()) {
    const auto& items = obj.list().items;
    List out;
    out.is_tuple = obj.list().is_tuple;
    for (int64_t i : slice_positions(static_cast<int64_t>(items.size()), start, stop, step))
      out.items.push_back(items[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    std::string out;
    if (is_ascii(s)) {
      for (int64_t i : slice_positions(static_cast<int64_t>(s.size()), start, stop, step)) out += s[static_cast<size_t>(i)];
    } else {
      auto chars = utf8_chars(s);
      for (int64_t i : slice_positions(static_cast<int64_t>(chars.size()), start, stop, step))
        out += chars[static_cast<size_t>(i)];
    }
    return Value(std::move(out));
  }
  return Value::undefined(fmt::format("'{}' cannot be sliced", object_name(obj)));
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_list()) return v.list().items;
  if (v.is_undefined()) return {};
  std::vector<Value> out;
  if (v.is_dict()) {
    for (const auto& [k, x] : v.dict().items) out.push_back(k);
  } else if (v.is_string()) {
    for (auto c : utf8_chars(v.str())) out.emplace_back(std::string(c));
  } else {
    fail("'{}' object is not iterable", v.type_name());
  }
  return out;
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) fail("'in <string>' requires string as left operand, not {}", item.type_name());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& x : container.list().items)
      if (py_equal(x, item)) return true;
    return false;
  }
  if (container.is_dict()) {
    if (item.is_list() && !item.list().is_tuple) throw Error("unhashable type: 'list'");
    if (item.is_dict() || item.is_namespace()) fail("unhashable type: '{}'", item.type_name());
    return container.dict().find(item) != nullptr;
  }
  if (container.is_undefined()) return false;
  fail("argument of type '{}' is not iterable", container.type_name());
}

Value call(const Value& fn, Args args) {
  if (!fn.is_callable()) fail("'{}' object is not callable", fn.type_name());
  return fn.callable().fn(args);
}

void check_args(const Args& args, const char* what, size_t max_pos, std::initializer_list<const char*> kw_names) {
  if (args.pos.size() > max_pos) fail("{}: takes at most {} positional arguments, got {}", what, max_pos, args.pos.size());
  for (const auto& kv : args.kw) {
    const std::string& k = kv.first;  // a plain reference: clang 14 cannot capture bindings
    if (std::none_of(kw_names.begin(), kw_names.end(), [&](const char* n) { return k == n; }))
      fail("{}: unexpected keyword argument '{}'", what, k);
  }
}

std::string str_arg(const Value& v, const char* what) {
  if (!v.is_string()) fail("{} must be a string, not {}", what, v.type_name());
  return v.str();
}

int64_t int_arg(const Value& v, const char* what) {
  if (!v.is_integral()) fail("{} must be an integer, not {}", what, v.type_name());
  return v.integral();
}

}  // namespace nanovllm::jinja
