// The grammars of JSON Schema's object, array, string, integer and number types (see
// json_schema.h for the policies).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "structured/json_schema_compiler.h"
#include "structured/regex_parser.h"
#include "util/check.h"

namespace nanovllm::structured {

namespace {

Expr lit(const char* s) { return Expr::literal(s); }

// Numbers in JSON Schemas are clamped to this magnitude (a sound subset, json_schema.h).
constexpr double kMaxBound = 1e30;
const char* const kMaxBoundDigits = "999999999999999999999999999999";  // 10^30 - 1

}  // namespace

std::optional<uint32_t> SchemaCompiler::count_keyword(const Json& s, const char* key,
                                                      const std::string& path) {
  if (!s.contains(key)) return std::nullopt;
  const Json& v = s[key];
  // An unsigned value above INT64_MAX is non-negative (too large: the limit below names it).
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    fail("{} {} must be a non-negative integer", key, at_path(path));
  if (v.get<uint64_t>() > limits_.max_repetition) {
    fail("grammar limit max_repetition ({}) exceeded by {} = {} {}", limits_.max_repetition, key,
         v.dump(), at_path(path));
  }
  return uint32_t(v.get<uint64_t>());
}

Expr SchemaCompiler::object_expr(const Json& s, const std::string& path, const std::string& name,
                                 uint32_t depth) {
  struct Property {
    std::string key;
    const Json* schema;  // nullptr: any value
    bool required;
  };
  std::vector<Property> props;
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) fail("properties {} must be an object", at_path(path));
    for (const auto& [key, schema] : s["properties"].items())
      props.push_back({key, &schema, false});
  }
  const Json* additional = nullptr;  // nullptr: no extra properties
  bool explicit_false = false;
  for (const char* key : {"additionalProperties", "unevaluatedProperties"}) {
    if (!s.contains(key)) continue;
    const Json& a = s[key];
    if (a.is_boolean() && !a.get<bool>()) {
      explicit_false = true;
    } else if (a.is_boolean() || a.is_object()) {
      additional = &a;
    } else {
      fail("{} {} must be a boolean or a schema", key, at_path(path));
    }
    break;  // additionalProperties wins when both are present
  }
  if (s.contains("required")) {
    const Json& req = s["required"];
    if (!req.is_array()) fail("required {} must be an array of strings", at_path(path));
    for (const Json& r : req) {
      if (!r.is_string()) fail("required {} must be an array of strings", at_path(path));
      const std::string key = r.get<std::string>();
      auto it =
          std::find_if(props.begin(), props.end(), [&](const Property& p) { return p.key == key; });
      if (it != props.end()) {
        it->required = true;
      } else if (explicit_false) {
        fail("required property '{}' is not in properties and additionalProperties is false {}",
             key, at_path(path));
      } else {
        props.push_back({key, additional, true});
      }
    }
  }
  // pair_i = "key" ws ":" ws value ws
  const size_t n = props.size();
  std::vector<Expr> pairs;
  for (size_t i = 0; i < n; ++i) {
    const Property& p = props[i];
    const std::string child = name + "-" + [&] {
      std::string part;
      for (char c : p.key) {
        const bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        part += ok ? c : '-';
      }
      return part.substr(0, 40);
    }();
    const Expr value =
        p.schema
            ? Expr::ref(schema_rule(*p.schema, child_path(child_path(path, "properties"), p.key),
                                    child, depth + 1))
            : Expr::ref(json_.value());
    pairs.push_back(Expr::seq({Expr::literal(Json(p.key).dump()), json_.ws_expr(), lit(":"),
                               json_.ws_expr(), value, json_.ws_expr()}));
  }
  // A_i: properties i.. with none written yet; B_i: the same after one was written (comma first).
  // Rules, not nested expressions: A_i refers to both A_i+1 and B_i+1.
  std::optional<Expr> extra_pair;
  if (additional) {
    const Expr value =
        additional->is_boolean()
            ? Expr::ref(json_.value())
            : Expr::ref(schema_rule(*additional, child_path(path, "additionalProperties"),
                                    name + "-additional", depth + 1));
    extra_pair = Expr::seq({Expr::ref(json_.string()), json_.ws_expr(), lit(":"), json_.ws_expr(),
                            value, json_.ws_expr()});
  }
  auto comma_pair = [&](const Expr& pair) { return Expr::seq({lit(","), json_.ws_expr(), pair}); };
  uint32_t a_next, b_next;
  if (extra_pair) {
    b_next = define(name + "-rest", Expr::star(comma_pair(*extra_pair)));
    a_next = define(name + "-extra", Expr::optional(Expr::seq({*extra_pair, Expr::ref(b_next)})));
  } else {
    b_next = define(name + "-end", Expr::empty());
    a_next = b_next;
  }
  for (size_t i = n; i-- > 0;) {
    deadline_.check();
    const Expr first = Expr::seq({pairs[i], Expr::ref(b_next)});
    const Expr later = Expr::seq({comma_pair(pairs[i]), Expr::ref(b_next)});
    const uint32_t b_i =
        define(name + "-b", props[i].required ? later : Expr::choice({later, Expr::ref(b_next)}));
    const uint32_t a_i =
        define(name + "-a", props[i].required ? first : Expr::choice({first, Expr::ref(a_next)}));
    a_next = a_i;
    b_next = b_i;
  }
  return Expr::seq({lit("{"), json_.ws_expr(), Expr::ref(a_next), lit("}")});
}

Expr SchemaCompiler::array_expr(const Json& s, const std::string& path, const std::string& name,
                                uint32_t depth) {
  std::vector<Expr> prefix;  // refs to the prefixItems' rules
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) fail("prefixItems {} must be an array of schemas", at_path(path));
    for (size_t i = 0; i < p.size(); ++i) {
      prefix.push_back(Expr::ref(
          schema_rule(p[i], child_path(child_path(path, "prefixItems"), std::to_string(i)),
                      name + "-" + std::to_string(i), depth + 1)));
    }
  }
  std::optional<Expr> item;  // the schema of items past the prefix; nullopt: none allowed
  if (s.contains("items")) {
    const Json& it = s["items"];
    if (it.is_array())
      fail("items {} is an array (draft 2019 and older): use prefixItems", at_path(path));
    if (!(it.is_boolean() && !it.get<bool>())) {
      item = Expr::ref(schema_rule(it, child_path(path, "items"), name + "-item", depth + 1));
    }
  } else if (prefix.empty()) {
    item = Expr::ref(json_.value());
  }
  if (s.contains("uniqueItems") &&
      !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>())) {
    fail("uniqueItems: true is not supported {}", at_path(path));
  }
  const uint32_t p = uint32_t(prefix.size());
  const uint32_t min = count_keyword(s, "minItems", path).value_or(0);
  uint32_t max = count_keyword(s, "maxItems", path).value_or(Expr::kUnbounded);
  if (!item) max = std::min(max, p);
  if (min > max)
    fail("minItems {} exceeds the items the array may have ({}) {}", min, max, at_path(path));
  if (max == 0) return Expr::seq({lit("["), json_.ws_expr(), lit("]")});
  auto element = [&](uint32_t j) {
    return Expr::seq({j < p ? prefix[j] : *item, json_.ws_expr()});
  };
  // tail_j: the items from j on, after j items were written (each with a comma first).
  Expr tail;
  if (item && max > p) {
    const uint32_t from = std::max(p, 1u);  // the first item (j = 0) is written without a comma
    const uint32_t lo = min > from ? min - from : 0;
    const uint32_t hi = max == Expr::kUnbounded ? Expr::kUnbounded : max - from;
    tail = Expr::repeat(Expr::seq({lit(","), json_.ws_expr(), element(from)}), lo, hi);
  }
  for (uint32_t j = p; j-- > 1;) {
    if (j >= max) {  // maxItems cuts the prefix short
      tail = Expr::empty();
      continue;
    }
    Expr step = Expr::seq({lit(","), json_.ws_expr(), element(j),
                           Expr::ref(define(name + "-tail", std::move(tail)))});
    tail = j < min ? std::move(step) : Expr::optional(std::move(step));
  }
  Expr items = Expr::seq({element(0), Expr::ref(define(name + "-tail", std::move(tail)))});
  if (min == 0) items = Expr::optional(std::move(items));
  return Expr::seq({lit("["), json_.ws_expr(), std::move(items), lit("]")});
}

Expr SchemaCompiler::string_expr(const Json& s, const std::string& path) {
  const std::optional<uint32_t> min_length = count_keyword(s, "minLength", path);
  const std::optional<uint32_t> max_length = count_keyword(s, "maxLength", path);
  const bool has_length = min_length || max_length;
  std::optional<std::string> regex;
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) fail("pattern {} must be a string", at_path(path));
    regex = s["pattern"].get<std::string>();
  }
  if (s.contains("format")) {
    if (!s["format"].is_string()) fail("format {} must be a string", at_path(path));
    const std::string format = s["format"].get<std::string>();
    if (regex) fail("format beside pattern is not supported {}", at_path(path));
    regex = format_regex(format);
    if (!regex) {
      fail("format '{}' is not supported {} (supported: date, time, date-time, uuid, email, ipv4)",
           format, at_path(path));
    }
  }
  if (regex) {
    if (has_length)
      fail("minLength / maxLength beside pattern or format is not supported {}", at_path(path));
    Expr content;
    try {
      content = parse_regex(*regex, limits_, deadline_);
    } catch (const Error& e) {
      fail("pattern {}: {}", at_path(path), e.what());
    }
    return Expr::seq({lit("\""), json_escape_content(content), lit("\"")});
  }
  if (!has_length) return Expr::ref(json_.string());
  const uint32_t lo = min_length.value_or(0), hi = max_length.value_or(Expr::kUnbounded);
  if (lo > hi) fail("minLength {} exceeds maxLength {} {}", lo, hi, at_path(path));
  return Expr::seq({lit("\""), Expr::repeat(Expr::ref(json_.string_char()), lo, hi), lit("\"")});
}

std::optional<DecimalInt> SchemaCompiler::integer_bound(const Json& s, bool lower,
                                                        const std::string& path, bool strict) {
  std::optional<DecimalInt> best;
  for (const bool exclusive : {false, true}) {
    const char* key = lower ? (exclusive ? "exclusiveMinimum" : "minimum")
                            : (exclusive ? "exclusiveMaximum" : "maximum");
    if (!s.contains(key)) continue;
    const Json& v = s[key];
    if (!v.is_number()) fail("{} {} must be a number", key, at_path(path));
    DecimalInt bound;
    if (v.is_number_integer()) {
      bound = DecimalInt::parse(v.dump());
      if (exclusive && strict) bound = lower ? bound.plus_one() : bound.minus_one();
    } else {
      const double x = v.get<double>();
      if (!std::isfinite(x)) fail("{} {} must be finite", key, at_path(path));
      const double r = lower ? std::ceil(x) : std::floor(x);
      bound =
          DecimalInt::parse(fmt::format("{:.0f}", std::clamp(r, -2 * kMaxBound, 2 * kMaxBound)));
      if (exclusive && strict && r == x) bound = lower ? bound.plus_one() : bound.minus_one();
    }
    if (!best || (lower ? compare(bound, *best) > 0 : compare(bound, *best) < 0)) best = bound;
  }
  if (best) {  // clamp to +-(10^30 - 1): a subset of the values, never more
    const DecimalInt cap{false, kMaxBoundDigits};
    if (lower && compare(*best, cap.negated()) < 0) best = cap.negated();
    if (!lower && compare(*best, cap) > 0) best = cap;
  }
  return best;
}

Expr SchemaCompiler::integer_expr(const Json& s, const std::string& path) {
  const std::optional<DecimalInt> lo = integer_bound(s, true, path),
                                  hi = integer_bound(s, false, path);
  if (!lo && !hi) return Expr::ref(json_.integer());
  return integer_range_expr(lo, hi);
}

Expr SchemaCompiler::number_expr(const Json& s, const std::string& path) {
  const std::optional<DecimalInt> lo = integer_bound(s, true, path),
                                  hi = integer_bound(s, false, path);
  if (!lo && !hi) return Expr::ref(json_.number());
  // Integral values: exact. Fractional ones: I.f lies in the open (I, I+1), -N.f in (-N-1, -N); a
  // whole unit interval must fit: ceil(lo) <= I <= floor(hi) - 1, ceil(-hi) <= N <= floor(-lo) - 1
  // (exclusive bounds alike: the intervals are open).
  const Expr fraction =
      Expr::seq({lit("."), Expr::repeat(Expr::chars(CodePointSet({{'0', '9'}})), 0, 5),
                 Expr::chars(CodePointSet({{'1', '9'}}))});
  std::vector<Expr> alts;
  alts.push_back(integer_range_expr(lo, hi));
  const DecimalInt zero;
  const std::optional<DecimalInt> lo_raw = integer_bound(s, true, path, false);
  const std::optional<DecimalInt> hi_raw = integer_bound(s, false, path, false);
  std::optional<DecimalInt> i_lo = lo_raw && compare(*lo_raw, zero) > 0 ? *lo_raw : zero, i_hi;
  if (hi_raw) i_hi = hi_raw->minus_one();
  alts.push_back(Expr::seq({integer_range_expr(i_lo, i_hi), fraction}));
  std::optional<DecimalInt> n_lo = hi_raw && compare(hi_raw->negated(), zero) > 0
                                       ? hi_raw->negated()
                                       : zero,
                            n_hi;
  if (lo_raw) n_hi = lo_raw->negated().minus_one();
  alts.push_back(Expr::seq({lit("-"), integer_range_expr(n_lo, n_hi), fraction}));
  return Expr::choice(std::move(alts));
}

}  // namespace nanovllm::structured
