#include "tokenizer/jinja_strings.h"

#include <algorithm>
#include <vector>

#include <utf8proc.h>

#include "util/check.h"

namespace nanovllm::jinja {
namespace {

// Code points with their byte offsets: cps[i] starts at offs[i]; offs.back() == s.size().
struct Decoded {
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
};

Decoded decode_all(const std::string& s) {
  Decoded d;
  for (size_t i = 0; i < s.size();) {
    d.offs.push_back(i);
    d.cps.push_back(utf8_decode(s, i));
  }
  d.offs.push_back(s.size());
  return d;
}

bool is_cased(uint32_t cp) {
  auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

uint32_t to_upper(uint32_t cp) { return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))); }
uint32_t to_lower(uint32_t cp) { return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))); }
uint32_t to_title(uint32_t cp) { return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))); }

}  // namespace

List py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit, bool from_right) {
  List out;
  if (sep) {
    if (sep->empty()) throw Error("split: empty separator");
    if (!from_right) {
      size_t start = 0;
      for (size_t at; maxsplit != 0 && (at = s.find(*sep, start)) != std::string::npos; --maxsplit) {
        out.items.emplace_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      out.items.emplace_back(s.substr(start));
    } else {
      size_t end = s.size();
      std::vector<Value> parts;
      for (; maxsplit != 0 && end >= sep->size(); --maxsplit) {
        size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string::npos) break;
        parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      parts.emplace_back(s.substr(0, end));
      out.items.assign(parts.rbegin(), parts.rend());
    }
    return out;
  }
  Decoded d = decode_all(s);
  const int64_t n = static_cast<int64_t>(d.cps.size());
  auto ws = [&](int64_t i) { return py_isspace(d.cps[static_cast<size_t>(i)]); };
  auto sub = [&](int64_t b, int64_t e) { return Value(s.substr(d.offs[b], d.offs[e] - d.offs[b])); };
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && ws(i)) ++i;
      if (i >= n) break;
      if (maxsplit == 0) {
        out.items.push_back(sub(i, n));
        break;
      }
      int64_t j = i;
      while (j < n && !ws(j)) ++j;
      out.items.push_back(sub(i, j));
      i = j;
      --maxsplit;
    }
  } else {
    std::vector<Value> parts;
    int64_t i = n;
    while (true) {
      while (i > 0 && ws(i - 1)) --i;
      if (i <= 0) break;
      if (maxsplit == 0) {
        parts.push_back(sub(0, i));
        break;
      }
      int64_t j = i;
      while (j > 0 && !ws(j - 1)) --j;
      parts.push_back(sub(j, i));
      i = j;
      --maxsplit;
    }
    out.items.assign(parts.rbegin(), parts.rend());
  }
  return out;
}

List py_splitlines(const std::string& s, bool keepends) {
  List out;
  Decoded d = decode_all(s);
  size_t start = 0;
  for (size_t i = 0; i < d.cps.size(); ++i) {
    uint32_t c = d.cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t eol = i + 1;
    if (c == '\r' && eol < d.cps.size() && d.cps[eol] == '\n') ++eol;
    size_t line_end = keepends ? d.offs[eol] : d.offs[i];
    out.items.emplace_back(s.substr(d.offs[start], line_end - d.offs[start]));
    start = eol;
    i = eol - 1;
  }
  if (start < d.cps.size()) out.items.emplace_back(s.substr(d.offs[start]));
  return out;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  Decoded d = decode_all(s);
  std::vector<uint32_t> set;
  if (chars) set = decode_all(*chars).cps;
  auto strip_it = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_isspace(c);
  };
  size_t b = 0, e = d.cps.size();
  if (left)
    while (b < e && strip_it(d.cps[b])) ++b;
  if (right)
    while (e > b && strip_it(d.cps[e - 1])) --e;
  return s.substr(d.offs[b], d.offs[e] - d.offs[b]);
}

std::string py_case(const std::string& s, const std::string& which) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t c = utf8_decode(s, i);
    uint32_t r;
    if (which == "upper") r = to_upper(c);
    else if (which == "lower") r = to_lower(c);
    else if (which == "capitalize") r = first ? to_title(c) : to_lower(c);
    else r = prev_cased ? to_lower(c) : to_title(c);
    prev_cased = is_cased(r);
    first = false;
    utf8_append(out, r);
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    auto chars = utf8_chars(s);
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += repl;
      if (i < chars.size()) out += chars[i];
    }
    return out;
  }
  size_t start = 0;
  for (size_t at; count != 0 && (at = s.find(old, start)) != std::string::npos; --count) {
    out.append(s, start, at - start);
    out += repl;
    start = at + old.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

}  // namespace nanovllm::jinja
