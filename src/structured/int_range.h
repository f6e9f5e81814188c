#pragma once
// Decimal integers in a range as a grammar expression, exactly: the JSON form of an integer
// (optional '-', no leading zeros, never "-0") for every integer in [lo, hi], and no other.
// Bounds are arbitrary-precision decimal integers; an absent bound is unbounded.
#include <optional>
#include <string>

#include "structured/grammar_expr.h"

namespace nanovllm::structured {

struct DecimalInt {
  bool negative = false;
  std::string magnitude = "0";  // decimal digits, no leading zeros ("0" for zero)

  static DecimalInt of(long long v);
  // The decimal text of an integral value ("-12", "340"); precondition: only digits and a sign.
  static DecimalInt parse(const std::string& text);
  DecimalInt plus_one() const;
  DecimalInt minus_one() const;
  DecimalInt negated() const;
  std::string to_string() const { return negative ? "-" + magnitude : magnitude; }
  bool operator==(const DecimalInt&) const = default;
};

// a < b, a == b, a > b as -1, 0, 1.
int compare(const DecimalInt& a, const DecimalInt& b);

// Integers in [lo, hi]: Expr::nothing() when empty.
Expr integer_range_expr(const std::optional<DecimalInt>& lo, const std::optional<DecimalInt>& hi);

}  // namespace nanovllm::structured
