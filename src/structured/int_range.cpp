#include "structured/int_range.h"

#include "util/check.h"

namespace nanovllm::structured {

namespace {

int compare_magnitudes(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

std::string add_one(std::string m) {
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i] != '9') {
      ++m[i];
      return m;
    }
    m[i] = '0';
  }
  m.insert(m.begin(), '1');
  return m;
}

std::string sub_one(std::string m) {  // precondition: m > 0
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i] != '0') {
      --m[i];
      break;
    }
    m[i] = '9';
  }
  const size_t nz = m.find_first_not_of('0');
  return nz == std::string::npos ? "0" : m.substr(nz);
}

Expr digit_class(char lo, char hi) {
  return Expr::chars(CodePointSet({{uint32_t(lo), uint32_t(hi)}}));
}

// Numbers written with exactly lo.size() == hi.size() digits (leading zeros as written) from lo
// to hi, lo <= hi. Recursion depth: the number of digits.
Expr same_length(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 0) return Expr::empty();
  if (lo == hi) return Expr::literal(lo);
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  const std::string zeros(n - 1, '0'), nines(n - 1, '9');
  if (lo_rest == zeros && hi_rest == nines) {
    return Expr::seq({digit_class(lo[0], hi[0]),
                      Expr::repeat(digit_class('0', '9'), uint32_t(n - 1), uint32_t(n - 1))});
  }
  if (lo[0] == hi[0])
    return Expr::seq({Expr::literal(std::string(1, lo[0])), same_length(lo_rest, hi_rest)});
  std::vector<Expr> alts;
  alts.push_back(Expr::seq({Expr::literal(std::string(1, lo[0])), same_length(lo_rest, nines)}));
  if (hi[0] - lo[0] > 1) {
    alts.push_back(
        Expr::seq({digit_class(char(lo[0] + 1), char(hi[0] - 1)),
                   Expr::repeat(digit_class('0', '9'), uint32_t(n - 1), uint32_t(n - 1))}));
  }
  alts.push_back(Expr::seq({Expr::literal(std::string(1, hi[0])), same_length(zeros, hi_rest)}));
  return Expr::choice(std::move(alts));
}

// Non-negative integers in [a, b] (b absent: unbounded), as magnitudes.
Expr nonnegative_range(const std::string& a, const std::optional<std::string>& b) {
  if (b && compare_magnitudes(a, *b) > 0) return Expr::nothing();
  std::vector<Expr> alts;
  const size_t la = a.size(), lb = b ? b->size() : la;
  for (size_t n = la; n <= lb; ++n) {
    std::string lo = a;
    if (n > la) {  // 10^(n-1)
      lo.assign(n, '0');
      lo[0] = '1';
    }
    const std::string hi = b && n == lb ? *b : std::string(n, '9');
    if (compare_magnitudes(lo, hi) <= 0) alts.push_back(same_length(lo, hi));
  }
  if (!b) {  // every number with more digits than a
    alts.push_back(
        Expr::seq({digit_class('1', '9'),
                   Expr::repeat(digit_class('0', '9'), uint32_t(la), Expr::kUnbounded)}));
  }
  return Expr::choice(std::move(alts));
}

}  // namespace

DecimalInt DecimalInt::of(long long v) {
  DecimalInt d;
  d.negative = v < 0;
  const unsigned long long m = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  d.magnitude = std::to_string(m);
  return d;
}

DecimalInt DecimalInt::parse(const std::string& text) {
  DecimalInt d;
  size_t i = 0;
  if (!text.empty() && text[0] == '-') {
    d.negative = true;
    i = 1;
  }
  const size_t nz = text.find_first_not_of('0', i);
  d.magnitude = nz == std::string::npos ? "0" : text.substr(nz);
  for (char c : d.magnitude) NV_CHECK(c >= '0' && c <= '9', "bad decimal integer '{}'", text);
  if (d.magnitude == "0") d.negative = false;
  return d;
}

DecimalInt DecimalInt::negated() const {
  DecimalInt d = *this;
  d.negative = magnitude != "0" && !negative;
  return d;
}

DecimalInt DecimalInt::plus_one() const {
  if (!negative) return {false, add_one(magnitude)};
  DecimalInt d{true, sub_one(magnitude)};
  if (d.magnitude == "0") d.negative = false;
  return d;
}

DecimalInt DecimalInt::minus_one() const { return negated().plus_one().negated(); }

int compare(const DecimalInt& a, const DecimalInt& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = compare_magnitudes(a.magnitude, b.magnitude);
  return a.negative ? -c : c;
}

Expr integer_range_expr(const std::optional<DecimalInt>& lo, const std::optional<DecimalInt>& hi) {
  if (lo && hi && compare(*lo, *hi) > 0) return Expr::nothing();
  std::vector<Expr> alts;
  // Negative part: -m for m in [max(1, -hi), -lo].
  if (!lo || lo->negative) {
    const std::string m_lo = hi && hi->negative ? hi->magnitude : "1";
    std::optional<std::string> m_hi;
    if (lo) m_hi = lo->magnitude;
    alts.push_back(Expr::seq({Expr::literal("-"), nonnegative_range(m_lo, m_hi)}));
  }
  // Non-negative part: [max(0, lo), hi].
  if (!hi || !hi->negative) {
    const std::string a = lo && !lo->negative ? lo->magnitude : "0";
    std::optional<std::string> b;
    if (hi) b = hi->magnitude;
    alts.push_back(nonnegative_range(a, b));
  }
  return Expr::choice(std::move(alts));
}

}  // namespace nanovllm::structured
