// json.dumps (for `tojson`) and nlohmann JSON -> template values.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_value.h"
#include "util/check.h"

namespace nanovllm::jinja {

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      ++i;
    } else if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
      ++i;
    } else {
      uint32_t cp = utf8_decode(s, i);
      if (cp > 0xffff) {  // a UTF-16 surrogate pair, as Python
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(d);
}

std::string json_key(const Value& k) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return json_float(k.as_float());
  if (k.is_none()) return "null";
  fail("tojson: keys must be str, int, float, bool or None, not {}", k.type_name());
}

// tojson output longer than this is refused (a value may share sublists, so its text can be
// exponentially longer than the value).
constexpr size_t kMaxJsonBytes = size_t{64} << 20;

void dump(std::string& out, const Value& v, const JsonOptions& opt, int depth) {
  if (out.size() > kMaxJsonBytes) fail("tojson: the text would be longer than {} bytes", kMaxJsonBytes);
  auto newline = [&](int d) {
    out += '\n';
    for (int i = 0; i < d; ++i) out += *opt.indent;
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    out += json_float(v.as_float());
  } else if (v.is_string()) {
    json_string(out, v.str(), opt.ensure_ascii);
  } else if (v.is_list()) {
    const auto& items = v.list().items;
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += opt.item_sep;
      if (opt.indent) newline(depth + 1);
      dump(out, items[i], opt, depth + 1);
    }
    if (opt.indent) newline(depth);
    out += ']';
  } else if (v.is_dict()) {
    std::vector<std::pair<std::string, const Value*>> items;
    for (const auto& [k, x] : v.dict().items) items.emplace_back(json_key(k), &x);
    if (opt.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (items.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += opt.item_sep;
      if (opt.indent) newline(depth + 1);
      json_string(out, items[i].first, opt.ensure_ascii);
      out += opt.key_sep;
      dump(out, *items[i].second, opt, depth + 1);
    }
    if (opt.indent) newline(depth);
    out += '}';
  } else {
    fail("tojson: Object of type {} is not JSON serializable", v.type_name());
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  dump(out, v, opt, 0);
  return out;
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth);

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

namespace {

// Checks the depth on the way down (the recursion must stop before the stack does).
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail("value nested deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(Value(it.key()), from_json_at(it.value(), depth + 1));
      return Value(std::move(d));
    }
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.items.reserve(j.size());
      for (const auto& x : j) l.items.push_back(from_json_at(x, depth + 1));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    default: return Value(None{});
  }
}

}  // namespace

}  // namespace nanovllm::jinja
