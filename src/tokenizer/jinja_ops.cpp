// Python's arithmetic operators on template values.
#include <cmath>

#include "tokenizer/jinja_builtins.h"

namespace nanovllm::jinja {
namespace {

constexpr size_t kMaxRepeatBytes = size_t{1} << 26;  // "x" * n larger than this is refused

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

// r = a op b with Python's (here: 64-bit) integers; overflow is an Error rather than wrong.
int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw Error("integer overflow");
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) throw Error("integer overflow");
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw Error("integer overflow");
  return r;
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (n > 0 && seq.str().size() > kMaxRepeatBytes / static_cast<size_t>(n)) throw Error("string repetition too large");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  if (n > 0 && seq.list().items.size() > kMaxRepeatBytes / 16 / static_cast<size_t>(n)) throw Error("list repetition too large");
  List l;
  l.is_tuple = seq.list().is_tuple;
  for (int64_t i = 0; i < n; ++i) l.items.insert(l.items.end(), seq.list().items.begin(), seq.list().items.end());
  return Value(std::move(l));
}

// Python's float divmod (CPython's float_divmod): the modulo takes the divisor's sign.
std::pair<double, double> float_divmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value(checked_add(a.integral(), b.integral()));
    if (nums) return Value(a.number() + b.number());
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
      List l = a.list();
      l.items.insert(l.items.end(), b.list().items.begin(), b.list().items.end());
      return Value(std::move(l));
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value(checked_sub(a.integral(), b.integral()));
    if (nums) return Value(a.number() - b.number());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value(checked_mul(a.integral(), b.integral()));
    if (nums) return Value(a.number() * b.number());
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.integral());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(b, a.integral());
    unsupported(op, a, b);
  }
  if (!nums) {
    if (op == "%" && a.is_string()) throw Error("unsupported: printf-style string formatting ('...' % args)");
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (b.number() == 0) throw Error("division by zero");
    return Value(a.number() / b.number());
  }
  if (op == "//" || op == "%") {
    if (b.number() == 0) throw Error(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) {
      int64_t x = a.integral(), y = b.integral();
      if (x == INT64_MIN && y == -1) throw Error("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    auto [div, mod] = float_divmod(a.number(), b.number());
    return Value(op == "//" ? div : mod);
  }
  if (op == "**") {
    if (ints && b.integral() >= 0) {
      int64_t base = a.integral(), e = b.integral(), result = 1;
      if (base == 0 || base == 1) return Value(e == 0 ? int64_t{1} : base);
      if (base == -1) return Value(e % 2 ? int64_t{-1} : int64_t{1});
      for (; e > 0; --e) result = checked_mul(result, base);
      return Value(result);
    }
    if (a.number() == 0 && b.number() < 0) throw Error("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.number(), b.number()));
  }
  fail("unknown operator '{}'", op);
}

}  // namespace nanovllm::jinja
