// Sequence filters of jinja2: sorting, selection, mapping and aggregation.
#include <algorithm>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_filters.h"
#include "tokenizer/jinja_strings.h"

namespace nanovllm::jinja {
namespace {

// jinja2's ignore_case: strings compare lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_case(v.str(), "lower")) : v;
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value a = attribute.is_none() ? x : attr_path(x, str_arg(attribute, "attribute"));
    Value b = attribute.is_none() ? y : attr_path(y, str_arg(attribute, "attribute"));
    int c = py_compare(sort_key(a, case_sensitive), sort_key(b, case_sensitive));
    return reverse ? c > 0 : c < 0;
  });
  return items;
}

}  // namespace

Value f_dictsort(const Value& v, const Args& a) {
  check_args(a, "dictsort", 3, {"case_sensitive", "by", "reverse"});
  bool cs = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
  std::string by = py_str(arg_or(a, 1, "by", Value("key")));
  bool reverse = arg_or(a, 2, "reverse", Value(false)).truthy();
  if (by != "key" && by != "value") throw Error("dictsort: you can only sort by either 'key' or 'value'");
  if (v.is_undefined()) throw Error(v.undefined_hint());
  Value pairs = f_items(v, Args{});
  return Value(List{sorted(pairs.list().items, reverse, cs, Value(by == "key" ? "0" : "1")), false});
}

Value f_sort(const Value& v, const Args& a) {
  check_args(a, "sort", 3, {"reverse", "case_sensitive", "attribute"});
  return Value(List{sorted(iterate(v), arg_or(a, 0, "reverse", Value(false)).truthy(),
                           arg_or(a, 1, "case_sensitive", Value(false)).truthy(),
                           arg_or(a, 2, "attribute", Value(None{}))),
                    false});
}

Value f_reverse(const Value& v, const Args& a) {
  check_args(a, "reverse", 0, {});
  if (v.is_string()) return get_slice(v, Value(None{}), Value(None{}), Value(int64_t{-1}));
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value(List{std::move(items), false});
}

Value f_unique(const Value& v, const Args& a) {
  check_args(a, "unique", 2, {"case_sensitive", "attribute"});
  bool cs = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
  const Value attribute = arg_or(a, 1, "attribute", Value(None{}));
  List out;
  std::vector<Value> seen;
  for (const auto& item : iterate(v)) {
    Value key = sort_key(attribute.is_none() ? item : attr_path(item, py_str(attribute)), cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) continue;
    seen.push_back(key);
    out.items.push_back(item);
  }
  return Value(std::move(out));
}

Value f_sum(const Value& v, const Args& a) {
  check_args(a, "sum", 2, {"attribute", "start"});
  const Value attribute = arg_or(a, 0, "attribute", Value(None{}));
  Value total = arg_or(a, 1, "start", Value(int64_t{0}));
  for (const auto& item : iterate(v))
    total = binary_op("+", total, attribute.is_none() ? item : attr_path(item, py_str(attribute)));
  return total;
}

static Value min_max(const Value& v, const Args& a, bool want_max) {
  check_args(a, want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  auto items = sorted(iterate(v), false, arg_or(a, 0, "case_sensitive", Value(false)).truthy(),
                      arg_or(a, 1, "attribute", Value(None{})));
  if (items.empty()) return Value::undefined("no aggregated item, sequence was empty");
  return want_max ? items.back() : items.front();
}
Value f_max(const Value& v, const Args& a) { return min_max(v, a, true); }
Value f_min(const Value& v, const Args& a) { return min_max(v, a, false); }

Value f_map(const Value& v, const Args& a) {
  List out;
  if (!v.truthy()) return Value(std::move(out));  // jinja2 maps nothing over a falsy value
  const Value* attribute = nullptr;
  for (const auto& [k, x] : a.kw)
    if (k == "attribute") attribute = &x;
  if (attribute) {
    check_args(a, "map", 0, {"attribute", "default"});
    const Value* dflt = a.get(SIZE_MAX, "default");
    for (const auto& item : iterate(v)) {
      Value r = attr_path(item, py_str(*attribute));
      out.items.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return Value(std::move(out));
  }
  if (a.pos.empty()) throw Error("map: expected a filter name or attribute=");
  std::string name = str_arg(a.pos[0], "map filter name");
  if (!has_filter(name)) fail("map: no filter named '{}'", name);
  Args rest{{a.pos.begin() + 1, a.pos.end()}, a.kw, a.line};
  for (const auto& item : iterate(v)) out.items.push_back(apply_filter(name, item, rest));
  return Value(std::move(out));
}

// select / reject / selectattr / rejectattr.
static Value select(const Value& v, const Args& a, bool by_attr, bool keep) {
  size_t first = by_attr ? 1 : 0;
  if (by_attr && a.pos.empty()) throw Error("selectattr: expected an attribute name");
  std::string test = a.pos.size() > first ? str_arg(a.pos[first], "test name") : "";
  if (!test.empty() && !has_test(test)) fail("no test named '{}'", test);
  Args rest{{a.pos.begin() + std::min(a.pos.size(), first + 1), a.pos.end()}, a.kw, a.line};
  List out;
  if (!v.truthy()) return Value(std::move(out));  // jinja2 selects nothing from a falsy value
  for (const auto& item : iterate(v)) {
    Value x = by_attr ? attr_path(item, str_arg(a.pos[0], "attribute")) : item;
    bool ok = test.empty() ? x.truthy() : apply_test(test, x, rest);
    if (ok == keep) out.items.push_back(item);
  }
  return Value(std::move(out));
}
Value f_select(const Value& v, const Args& a) { return select(v, a, false, true); }
Value f_reject(const Value& v, const Args& a) { return select(v, a, false, false); }
Value f_selectattr(const Value& v, const Args& a) { return select(v, a, true, true); }
Value f_rejectattr(const Value& v, const Args& a) { return select(v, a, true, false); }

}  // namespace nanovllm::jinja
