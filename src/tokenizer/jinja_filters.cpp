// jinja2's built-in filters (the ones chat templates use), plus transformers' `tojson`.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include <utf8proc.h>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_filters.h"
#include "tokenizer/jinja_strings.h"

namespace nanovllm::jinja {

Value arg_or(const Args& a, size_t i, const char* name, Value dflt) {
  const Value* v = a.get(i, name);
  return v ? *v : dflt;
}

// Looks up a dotted attribute path ("a.b", "0") as jinja2's make_attrgetter does.
Value attr_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    if (v.is_undefined()) return v;
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value f_items(const Value& v, const Args& a) {
  check_args(a, "items", 0, {});
  List out;
  if (v.is_undefined()) return Value(std::move(out));
  if (!v.is_dict()) throw Error("items: can only get item pairs from a mapping");
  for (const auto& [k, x] : v.dict().items) out.items.emplace_back(List{{k, x}, true});
  return Value(std::move(out));
}

namespace {

using FilterFn = Value (*)(const Value&, const Args&);


Value length(const Value& v) {
  if (v.is_string()) return Value(static_cast<int64_t>(utf8_length(v.str())));
  if (v.is_list()) return Value(static_cast<int64_t>(v.list().items.size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
  if (v.is_undefined()) return Value(int64_t{0});
  fail("object of type '{}' has no len()", v.type_name());
}

Value f_length(const Value& v, const Args& a) {
  check_args(a, "length", 0, {});
  return length(v);
}

Value f_tojson(const Value& v, const Args& a) {
  check_args(a, "tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions opt;
  const Value none{None{}};
  opt.ensure_ascii = arg_or(a, 0, "ensure_ascii", Value(false)).truthy();
  const Value indent = arg_or(a, 1, "indent", none);
  if (indent.is_integral() && indent.integral() > kMaxWidth) fail("tojson: indent {} is larger than {}", indent.integral(), kMaxWidth);
  if (indent.is_integral()) opt.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.integral())), ' ');
  else if (indent.is_string()) opt.indent = indent.str();
  else if (!indent.is_none()) fail("tojson: indent must be an integer or a string, not {}", indent.type_name());
  if (opt.indent) opt.item_sep.assign(1, ',');
  const Value seps = arg_or(a, 2, "separators", none);
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.list().items.size() != 2) throw Error("tojson: separators must be a pair of strings");
    opt.item_sep = str_arg(seps.list().items[0], "tojson separator");
    opt.key_sep = str_arg(seps.list().items[1], "tojson separator");
  }
  opt.sort_keys = arg_or(a, 3, "sort_keys", Value(false)).truthy();
  return Value(to_json(v, opt));
}

Value f_string(const Value& v, const Args& a) {
  check_args(a, "string", 0, {});
  return Value(py_str(v));
}

Value f_trim(const Value& v, const Args& a) {
  check_args(a, "trim", 1, {"chars"});
  const Value chars = arg_or(a, 0, "chars", Value(None{}));
  return Value(py_strip(py_str(v), chars.is_none() ? std::nullopt : std::optional(str_arg(chars, "trim chars")), true, true));
}

template <const char* kWhich>
Value f_case(const Value& v, const Args& a) {
  check_args(a, kWhich, 0, {});
  return Value(py_case(py_str(v), kWhich));
}
constexpr char kUpper[] = "upper", kLower[] = "lower", kCapitalize[] = "capitalize";

// jinja2's title filter (not str.title): words start after runs of "-", whitespace, "(", "{",
// "[" or "<"; each word is capitalized (first character upper, the rest lower).
Value f_title(const Value& v, const Args& a) {
  check_args(a, "title", 0, {});
  std::string s = py_str(v), out, word;
  auto flush = [&] {
    if (word.empty()) return;
    auto chars = utf8_chars(word);
    out += py_case(std::string(chars[0]), "upper");
    out += py_case(word.substr(chars[0].size()), "lower");
    word.clear();
  };
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = utf8_decode(s, i);
    if (cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp)) {
      flush();
      out.append(s, start, i - start);
    } else {
      word.append(s, start, i - start);
    }
  }
  flush();
  return Value(std::move(out));
}

Value f_int(const Value& v, const Args& a) {
  check_args(a, "int", 2, {"default", "base"});
  Value dflt = arg_or(a, 0, "default", Value(int64_t{0}));
  if (v.is_undefined()) throw Error(v.undefined_hint());  // int(Undefined) raises in jinja2
  int64_t base = int_arg(arg_or(a, 1, "base", Value(int64_t{10})), "int base");
  if (v.is_integral()) return Value(v.integral());
  if (v.is_float()) return std::isfinite(v.as_float()) ? Value(static_cast<int64_t>(v.as_float())) : dflt;
  if (!v.is_string()) return dflt;
  std::string s = py_strip(v.str(), std::nullopt, true, true);
  std::string digits;
  for (char c : s)
    if (c != '_') digits += c;
  if (!digits.empty()) {
    char* end = nullptr;
    errno = 0;
    long long r = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
    if (*end == 0 && errno == 0) return Value(static_cast<int64_t>(r));
    double d = std::strtod(s.c_str(), &end);
    if (*end == 0 && std::isfinite(d) && base == 10) return Value(static_cast<int64_t>(d));
  }
  return dflt;
}

Value f_float(const Value& v, const Args& a) {
  check_args(a, "float", 1, {"default"});
  Value dflt = arg_or(a, 0, "default", Value(0.0));
  if (v.is_undefined()) throw Error(v.undefined_hint());  // float(Undefined) raises in jinja2
  if (v.is_number()) return Value(v.number());
  if (!v.is_string()) return dflt;
  std::string s = py_strip(v.str(), std::nullopt, true, true);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == 0 ? Value(d) : dflt;
}

Value f_default(const Value& v, const Args& a) {
  check_args(a, "default", 2, {"default_value", "boolean"});
  bool boolean = arg_or(a, 1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg_or(a, 0, "default_value", Value(""));
  return v;
}

Value f_first(const Value& v, const Args& a) {
  check_args(a, "first", 0, {});
  auto items = iterate(v);
  return items.empty() ? Value::undefined("no first item, sequence was empty") : items.front();
}

Value f_last(const Value& v, const Args& a) {
  check_args(a, "last", 0, {});
  auto items = iterate(v);
  return items.empty() ? Value::undefined("no last item, sequence was empty") : items.back();
}

Value f_join(const Value& v, const Args& a) {
  check_args(a, "join", 2, {"d", "attribute"});
  std::string sep = py_str(arg_or(a, 0, "d", Value("")));
  const Value attribute = arg_or(a, 1, "attribute", Value(None{}));
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += py_str(attribute.is_none() ? item : attr_path(item, py_str(attribute)));
  }
  return Value(std::move(out));
}

Value f_list(const Value& v, const Args& a) {
  check_args(a, "list", 0, {});
  return Value(List{iterate(v), false});
}

Value f_replace(const Value& v, const Args& a) {
  check_args(a, "replace", 3, {"old", "new", "count"});
  const Value* old = a.get(0, "old");
  const Value* repl = a.get(1, "new");
  if (!old || !repl) throw Error("replace: expected the old and new strings");
  const Value count = arg_or(a, 2, "count", Value(None{}));
  return Value(py_replace(py_str(v), py_str(*old), py_str(*repl), count.is_none() ? -1 : int_arg(count, "count")));
}

Value f_round(const Value& v, const Args& a) {
  check_args(a, "round", 2, {"precision", "method"});
  int64_t precision = int_arg(arg_or(a, 0, "precision", Value(int64_t{0})), "round precision");
  std::string method = py_str(arg_or(a, 1, "method", Value("common")));
  if (!v.is_number()) fail("round: expected a number, not {}", v.type_name());
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value(std::ceil(v.number() * scale) / scale);
  if (method == "floor") return Value(std::floor(v.number() * scale) / scale);
  if (method != "common") throw Error("round: method must be 'common', 'ceil' or 'floor'");
  if (v.is_integral()) return Value(v.integral());  // Python: round(int, n) stays an int
  double x = v.as_float();
  if (!std::isfinite(x) || precision > 300) return Value(x);
  char buf[512];  // printf rounds the exact binary value half-to-even, as Python's round
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::max<int64_t>(precision, 0)), x);
  double r = std::strtod(buf, nullptr);
  if (precision < 0) r = std::nearbyint(x * scale) / scale;
  return Value(r);
}

Value f_abs(const Value& v, const Args& a) {
  check_args(a, "abs", 0, {});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (!v.is_integral()) fail("bad operand type for abs(): '{}'", v.type_name());
  if (v.integral() == INT64_MIN) throw Error("integer overflow");
  return Value(v.integral() < 0 ? -v.integral() : v.integral());
}

Value f_attr(const Value& v, const Args& a) {
  check_args(a, "attr", 1, {});
  if (v.is_undefined()) return v;
  return get_attr(v, str_arg(a.pos.empty() ? Value() : a.pos[0], "attr name"));
}

Value f_safe(const Value& v, const Args& a) {
  check_args(a, "safe", 0, {});
  return v;
}

Value f_escape(const Value& v, const Args& a) {
  check_args(a, "escape", 0, {});
  std::string out;
  for (char c : py_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_indent(const Value& v, const Args& a) {
  check_args(a, "indent", 3, {"width", "first", "blank"});
  const Value width = arg_or(a, 0, "width", Value(int64_t{4}));
  if (!width.is_string() && int_arg(width, "indent width") > kMaxWidth) fail("indent: width is larger than {}", kMaxWidth);
  std::string ind = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, int_arg(width, "indent width"))), ' ');
  bool first = arg_or(a, 1, "first", Value(false)).truthy(), blank = arg_or(a, 2, "blank", Value(false)).truthy();
  if (!v.is_string()) fail("indent: expected a string, not {}", v.type_name());
  List lines = py_splitlines(v.str() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.items.size(); ++i) {
    const std::string& line = lines.items[i].str();
    if (i > 0) out += "\n";
    if (i > 0 ? blank || !line.empty() : first) out += ind;
    out += line;
  }
  return Value(std::move(out));
}

// jinja2 counts matches of \w+ (letters, digits and "_").
Value f_wordcount(const Value& v, const Args& a) {
  check_args(a, "wordcount", 0, {});
  const std::string s = py_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_decode(s, i);
    auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    bool w = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
             (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
    n += w && !in_word;
    in_word = w;
  }
  return Value(n);
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"length", f_length},     {"count", f_length},   {"tojson", f_tojson},       {"string", f_string},
      {"trim", f_trim},         {"upper", f_case<kUpper>}, {"lower", f_case<kLower>}, {"title", f_title},
      {"capitalize", f_case<kCapitalize>}, {"int", f_int}, {"float", f_float},   {"default", f_default},
      {"d", f_default},         {"first", f_first},    {"last", f_last},           {"join", f_join},
      {"list", f_list},         {"items", f_items},    {"dictsort", f_dictsort},   {"sort", f_sort},
      {"reverse", f_reverse},   {"unique", f_unique},  {"replace", f_replace},     {"round", f_round},
      {"abs", f_abs},           {"sum", f_sum},        {"max", f_max},             {"min", f_min},
      {"map", f_map},           {"select", f_select},  {"reject", f_reject},       {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr}, {"attr", f_attr},  {"safe", f_safe},           {"escape", f_escape},
      {"e", f_escape},          {"indent", f_indent},  {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, const Args& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail("no filter named '{}'", name);
  return it->second(v, args);
}

}  // namespace nanovllm::jinja
