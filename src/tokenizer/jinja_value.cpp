#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include <utf8proc.h>

#include "util/check.h"

namespace nanovllm::jinja {

namespace {

void check_depth(int depth) {
  if (depth > kMaxValueDepth) fail("value nested deeper than {} levels", kMaxValueDepth);
}

}  // namespace

Value::Value(List l) {
  int d = 0;
  for (const Value& v : l.items) d = std::max(d, v.depth());
  l.depth = d + 1;
  check_depth(l.depth);
  v_ = std::make_shared<const List>(std::move(l));
}

Value::Value(Dict d) {
  int m = 0;
  for (const auto& [k, v] : d.items) m = std::max({m, k.depth(), v.depth()});
  d.depth = m + 1;
  check_depth(d.depth);
  v_ = std::make_shared<const Dict>(std::move(d));
}

int Value::depth() const {
  if (is_list()) return list().depth;
  if (is_dict()) return dict().depth;
  if (is_namespace()) return ns_attrs().depth;
  return 0;
}


// ---- containers ----

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(const Value& key, Value v) {
  for (auto& [k, old] : items) {
    if (py_equal(k, key)) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

const Value* Args::get(size_t index, std::string_view name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

// ---- basic properties ----

double Value::number() const {
  if (is_float()) return as_float();
  return static_cast<double>(integral());
}

std::string Value::type_name() const {
  switch (v_.index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return list().is_tuple ? "tuple" : "list";
    case 7: return "dict";
    case 8: return "Namespace";
    default: return "function";
  }
}

bool Value::truthy() const {
  switch (v_.index()) {
    case 0: return false;
    case 1: return false;
    case 2: return as_bool();
    case 3: return as_int() != 0;
    case 4: return as_float() != 0.0;
    case 5: return !str().empty();
    case 6: return !list().items.empty();
    case 7: return !dict().items.empty();
    default: return true;
  }
}

// ---- UTF-8 ----

uint32_t utf8_decode(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 0;
  bool valid = n > 0 && i + n < s.size();
  for (size_t k = 1; valid && k <= n; ++k) valid = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
  if (!valid) {  // ASCII, or an invalid byte: decodes as itself
    ++i;
    return c;
  }
  uint32_t cp = c & (0x3fu >> n);
  for (size_t k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  i += n + 1;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  char buf[4];
  auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), reinterpret_cast<utf8proc_uint8_t*>(buf));
  out.append(buf, static_cast<size_t>(n));
}

namespace {

bool py_isprintable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

}  // namespace

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    utf8_decode(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) utf8_decode(s, i);
  return n;
}

bool py_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// ---- comparison ----

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.integral() == b.integral();
  }
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!py_equal(x.items[i], y.items[i])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const auto &x = a.dict(), &y = b.dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* w = y.find(k);
      if (!w || !py_equal(v, *w)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.ns_attrs() == &b.ns_attrs();
  if (a.is_callable() && b.is_callable()) return &a.callable() == &b.callable();
  return false;
}

int py_compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.number(), y = b.number();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.integral(), y = b.integral();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

// ---- str / repr ----

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16, else
  // d.ddde+XX. (Plain char buffers: GCC 12 warns falsely on std::string splicing here.)
  char sci[64];
  char* end = std::to_chars(sci, sci + sizeof(sci), d, std::chars_format::scientific).ptr;
  *end = 0;
  const char* p = sci;
  const bool neg = *p == '-';
  if (neg) ++p;
  char digits[32];
  int nd = 0;
  for (; *p != 'e'; ++p)
    if (*p != '.') digits[nd++] = *p;
  const int exp = std::atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0') --nd;
  char out[400];
  int n = 0;
  if (neg) out[n++] = '-';
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      for (int i = 0; i <= exp; ++i) out[n++] = i < nd ? digits[i] : '0';
      out[n++] = '.';
      if (nd > exp + 1) {
        for (int i = exp + 1; i < nd; ++i) out[n++] = digits[i];
      } else {
        out[n++] = '0';
      }
    } else {
      out[n++] = '0';
      out[n++] = '.';
      for (int i = 0; i < -exp - 1; ++i) out[n++] = '0';
      for (int i = 0; i < nd; ++i) out[n++] = digits[i];
    }
  } else {
    out[n++] = digits[0];
    if (nd > 1) {
      out[n++] = '.';
      for (int i = 1; i < nd; ++i) out[n++] = digits[i];
    }
    n += std::snprintf(out + n, sizeof(out) - static_cast<size_t>(n), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return std::string(out, static_cast<size_t>(n));
}

namespace {

std::string repr_string(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = utf8_decode(s, i);
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7f) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      out += buf;
    } else if (cp < 0x7f || py_isprintable(cp)) {
      out.append(s, start, i - start);
    } else {
      std::snprintf(buf, sizeof(buf), cp <= 0xff ? "\\x%02x" : cp <= 0xffff ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
    }
  }
  out += quote;
  return out;
}

}  // namespace

// repr() text longer than this is refused (a value may share sublists, so its text can be
// exponentially longer than the value).
constexpr size_t kMaxReprBytes = size_t{64} << 20;

std::string py_repr(const Value& v) {
  auto bounded = [](std::string& out) {
    if (out.size() > kMaxReprBytes) fail("repr: the text would be longer than {} bytes", kMaxReprBytes);
  };
  if (v.is_string()) return repr_string(v.str());
  if (v.is_list()) {
    const auto& l = v.list();
    std::string out = l.is_tuple ? "(" : "[";
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      out += py_repr(l.items[i]);
      bounded(out);
    }
    if (l.is_tuple && l.items.size() == 1) out += ",";
    return out + (l.is_tuple ? ")" : "]");
  }
  if (v.is_dict() || v.is_namespace()) {
    const Dict& d = v.is_dict() ? v.dict() : v.ns_attrs();
    std::string out = "{";
    for (size_t i = 0; i < d.items.size(); ++i) {
      if (i) out += ", ";
      out += py_repr(d.items[i].first) + ": " + py_repr(d.items[i].second);
      bounded(out);
    }
    out += "}";
    return v.is_dict() ? out : "<Namespace " + out + ">";
  }
  if (v.is_undefined()) return "Undefined";
  return py_str(v);
}

std::string py_str(const Value& v) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) return "";
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.as_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_float()) return py_float_repr(v.as_float());
  if (v.is_callable()) return "<function " + v.callable().name + ">";
  return py_repr(v);
}

}  // namespace nanovllm::jinja
