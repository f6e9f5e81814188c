// Methods of str, dict and list a template may call (Python semantics). The mutating ones
// exist as attributes but refuse to run, as in jinja2's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <array>

#include <utf8proc.h>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"

namespace nanovllm::jinja {
namespace {

constexpr std::array kStrMethods = {"startswith", "endswith", "split",   "rsplit",  "splitlines", "strip",
                                    "lstrip",     "rstrip",   "upper",   "lower",   "title",      "capitalize",
                                    "replace",    "find",     "rfind",   "index",   "rindex",     "count",
                                    "join",       "isdigit",  "isalpha", "isalnum", "isspace",    "isupper",
                                    "islower",    "format",   "encode",  "center",  "ljust",      "rjust"};
constexpr std::array kDictMethods = {"items", "keys",  "values",     "get",     "copy",
                                     "pop",   "popitem", "setdefault", "update", "clear"};
constexpr std::array kListMethods = {"index", "count",  "copy", "append", "extend", "insert",
                                     "pop",   "remove", "reverse", "sort", "clear"};

template <size_t N>
bool in(const std::array<const char*, N>& names, const std::string& name) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

bool all_chars(const std::string& s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();)
    if (!pred(utf8_decode(s, i))) return false;
  return true;
}

utf8proc_category_t category(uint32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }
bool is_alpha(uint32_t cp) { return category(cp) >= UTF8PROC_CATEGORY_LU && category(cp) <= UTF8PROC_CATEGORY_LO; }
bool is_digit(uint32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; }
bool is_alnum(uint32_t cp) { return is_alpha(cp) || is_digit(cp); }

// Python's str.isupper / islower: at least one cased character and no cased one of the other case.
bool has_case(const std::string& s, bool upper) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    auto c = category(utf8_decode(s, i));
    if (c == (upper ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU)) return false;
    cased |= c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL;
  }
  return cased;
}

// A position in code points (Python's str.find results) from a byte offset.
int64_t cp_index(const std::string& s, size_t byte) {
  return byte == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, byte)));
}

bool affix_match(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const Value& v) {
    const std::string& a = str_arg(v, prefix ? "startswith argument" : "endswith argument");
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_list() && arg.list().is_tuple)
    return std::any_of(arg.list().items.begin(), arg.list().items.end(), one);
  return one(arg);
}

Value pad(const std::string& s, const Args& a, const std::string& how) {
  int64_t width = int_arg(a.pos.empty() ? Value() : a.pos[0], "width");
  if (width > kMaxWidth) fail("{}: width {} is larger than {}", how, width, kMaxWidth);
  std::string fill = a.pos.size() > 1 ? str_arg(a.pos[1], "fillchar") : " ";
  int64_t n = static_cast<int64_t>(utf8_length(s));
  if (width <= n) return Value(s);
  int64_t total = width - n, left = how == "rjust" ? total : how == "ljust" ? 0 : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return Value(std::move(out));
}

Value str_method(const std::string& s, const std::string& name, const Args& a) {
  const Value none{None{}};
  auto arg = [&](size_t i) -> const Value& { return i < a.pos.size() ? a.pos[i] : none; };
  if (name == "startswith" || name == "endswith") {
    check_args(a, name.c_str(), 1, {});
    return Value(affix_match(s, arg(0), name == "startswith"));
  }
  if (name == "split" || name == "rsplit") {
    check_args(a, name.c_str(), 2, {"sep", "maxsplit"});
    const Value* sep = a.get(0, "sep");
    const Value* maxsplit = a.get(1, "maxsplit");
    return Value(py_split(s, sep && !sep->is_none() ? std::optional<std::string>(str_arg(*sep, "sep")) : std::nullopt,
                          maxsplit ? int_arg(*maxsplit, "maxsplit") : -1, name == "rsplit"));
  }
  if (name == "splitlines") {
    check_args(a, name.c_str(), 1, {"keepends"});
    const Value* keep = a.get(0, "keepends");
    return Value(py_splitlines(s, keep && keep->truthy()));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    check_args(a, name.c_str(), 1, {});
    std::optional<std::string> chars;
    if (!arg(0).is_none()) chars = str_arg(arg(0), "strip argument");
    return Value(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    check_args(a, name.c_str(), 0, {});
    return Value(py_case(s, name));
  }
  if (name == "replace") {
    check_args(a, name.c_str(), 3, {});
    int64_t count = a.pos.size() > 2 ? int_arg(a.pos[2], "replace count") : -1;
    return Value(py_replace(s, str_arg(arg(0), "replace argument"), str_arg(arg(1), "replace argument"), count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    check_args(a, name.c_str(), 1, {});
    const std::string& sub = str_arg(arg(0), "substring");
    size_t at = name == "find" || name == "index" ? s.find(sub) : s.rfind(sub);
    if (at == std::string::npos && name.find("index") != std::string::npos) throw Error("substring not found");
    return Value(cp_index(s, at));
  }
  if (name == "count") {
    check_args(a, name.c_str(), 1, {});
    const std::string& sub = str_arg(arg(0), "substring");
    if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s)) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    check_args(a, name.c_str(), 1, {});
    std::string out;
    bool first = true;
    for (const auto& v : iterate(arg(0))) {
      if (!first) out += s;
      first = false;
      out += str_arg(v, "join item");
    }
    return Value(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    check_args(a, name.c_str(), 2, {});
    return pad(s, a, name);
  }
  check_args(a, name.c_str(), 0, {});
  if (name == "isdigit") return Value(all_chars(s, is_digit));
  if (name == "isalpha") return Value(all_chars(s, is_alpha));
  if (name == "isalnum") return Value(all_chars(s, is_alnum));
  if (name == "isspace") return Value(all_chars(s, py_isspace));
  if (name == "isupper" || name == "islower") return Value(has_case(s, name == "isupper"));
  fail("unsupported: str.{}()", name);
}

Value dict_method(const Value& self, const std::string& name, const Args& a) {
  const Dict& d = self.dict();
  if (name == "get") {
    check_args(a, "dict.get", 2, {});
    if (a.pos.empty()) throw Error("dict.get: expected a key");
    const Value* v = d.find(a.pos[0]);
    return v ? *v : a.pos.size() > 1 ? a.pos[1] : Value(None{});
  }
  check_args(a, name.c_str(), 0, {});
  if (name == "copy") return self;
  List out;
  for (const auto& [k, v] : d.items) {
    if (name == "items") out.items.emplace_back(List{{k, v}, true});
    else out.items.push_back(name == "keys" ? k : v);
  }
  if (name == "items" || name == "keys" || name == "values") return Value(std::move(out));
  fail("dict.{}() is not allowed: template data is immutable", name);
}

Value list_method(const Value& self, const std::string& name, const Args& a) {
  const auto& items = self.list().items;
  if (name == "index" || name == "count") {
    check_args(a, name.c_str(), 1, {});
    if (a.pos.empty()) fail("list.{}: expected an argument", name);
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!py_equal(items[i], a.pos[0])) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") throw Error("list.index(x): x not in list");
    return Value(n);
  }
  if (name == "copy") return self;
  fail("list.{}() is not allowed: template data is immutable", name);
}

}  // namespace

bool is_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return in(kStrMethods, name);
  if (obj.is_dict()) return in(kDictMethods, name);
  if (obj.is_list()) return obj.list().is_tuple ? name == "index" || name == "count" : in(kListMethods, name);
  return false;
}

Value call_method(const Value& obj, const std::string& name, const Args& args) {
  if (obj.is_string()) return str_method(obj.str(), name, args);
  if (obj.is_dict()) return dict_method(obj, name, args);
  return list_method(obj, name, args);
}

}  // namespace nanovllm::jinja
