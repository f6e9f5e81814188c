#include "util/parse_size.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "util/check.h"

namespace nanovllm {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The multiplier of a suffix (lowercased), or 0 when it is none of the accepted ones.
int64_t unit(std::string_view suffix) {
  std::string s;
  for (char c : suffix) s += char(std::tolower(static_cast<unsigned char>(c)));
  if (s.empty() || s == "b") return 1;
  const std::string_view letters = "kmgt";
  const size_t p = letters.find(s[0]);
  if (p == std::string_view::npos) return 0;
  const std::string_view rest = std::string_view(s).substr(1);
  int64_t m = 1;
  if (rest.empty() || rest == "ib") {
    for (size_t i = 0; i <= p; ++i) m *= 1024;
  } else if (rest == "b") {
    for (size_t i = 0; i <= p; ++i) m *= 1000;
  } else {
    return 0;
  }
  return m;
}

}  // namespace

int64_t parse_size(std::string_view text, std::string_view what) {
  const std::string_view t = trim(text);
  const auto bad = [&](const char* why) {
    fail("{}: '{}' is not a size ({}; e.g. 4096, 512M, 4G, 4GiB, 1.5GB)", what, std::string(text), why);
  };
  size_t i = 0;
  // Integer part, then an optional fraction: digits only (no sign, no exponent).
  uint64_t whole = 0;
  bool any_digit = false, overflow = false;
  for (; i < t.size() && is_digit(t[i]); ++i) {
    any_digit = true;
    const uint64_t d = uint64_t(t[i] - '0');
    if (whole > (std::numeric_limits<uint64_t>::max() - d) / 10) overflow = true;
    else whole = whole * 10 + d;
  }
  std::string_view fraction;
  if (i < t.size() && t[i] == '.') {
    const size_t f0 = ++i;
    while (i < t.size() && is_digit(t[i])) ++i;
    fraction = t.substr(f0, i - f0);
    any_digit = any_digit || !fraction.empty();
  }
  if (!any_digit) bad(t.empty() ? "empty" : (t[0] == '-' ? "negative" : "no digits"));
  const int64_t m = unit(trim(t.substr(i)));
  if (m == 0) bad("unknown unit; use K, M, G, T (x1024), KiB.., KB.. (x1000) or B");
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  if (overflow || whole > kMax / uint64_t(m)) bad("more than 2^63 - 1 bytes");
  uint64_t bytes = whole * uint64_t(m);
  // The fraction times the unit, rounded down, in integers: its first 18 digits (< 2^60) times
  // the unit (<= 2^40) fit in 128 bits; later digits are worth less than a byte.
  unsigned __int128 frac = 0, denom = 1;
  for (size_t k = 0; k < fraction.size() && k < 18; ++k) {
    frac = frac * 10 + unsigned(fraction[k] - '0');
    denom *= 10;
  }
  const unsigned __int128 extra = frac * uint64_t(m) / denom;
  if (extra > kMax - bytes) bad("more than 2^63 - 1 bytes");
  bytes += uint64_t(extra);
  return int64_t(bytes);
}

std::string format_size(int64_t bytes) {
  NV_CHECK(bytes >= 0, "format_size({})", bytes);
  static constexpr const char* kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  int64_t m = int64_t(1) << 40;
  for (const char* u : kUnits) {
    if (bytes != 0 && bytes % m == 0) return std::to_string(bytes / m) + u;
    m >>= 10;
  }
  return std::to_string(bytes);
}

int64_t parse_int(std::string_view text, int64_t min, int64_t max, std::string_view what) {
  const std::string_view t = trim(text);
  size_t i = 0;
  bool negative = false;
  if (i < t.size() && (t[i] == '-' || t[i] == '+')) negative = t[i++] == '-';
  if (i == t.size()) fail("{}: '{}' is not an integer", what, std::string(text));
  // Magnitude as unsigned, so that INT64_MIN parses.
  uint64_t v = 0;
  constexpr uint64_t kLimit = uint64_t(std::numeric_limits<int64_t>::max()) + 1;
  for (; i < t.size(); ++i) {
    if (!is_digit(t[i])) fail("{}: '{}' is not an integer", what, std::string(text));
    const uint64_t d = uint64_t(t[i] - '0');
    if (v > (kLimit - d) / 10) fail("{}: '{}' is out of range [{}, {}]", what, std::string(text), min, max);
    v = v * 10 + d;
  }
  if (!negative && v > kLimit - 1) fail("{}: '{}' is out of range [{}, {}]", what, std::string(text), min, max);
  const int64_t r = negative ? (v == kLimit ? std::numeric_limits<int64_t>::min() : -int64_t(v)) : int64_t(v);
  if (r < min || r > max) fail("{}: '{}' is out of range [{}, {}]", what, std::string(text), min, max);
  return r;
}

}  // namespace nanovllm
