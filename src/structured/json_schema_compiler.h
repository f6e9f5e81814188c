#pragma once
// Internals of json_schema.h: one SchemaCompiler per compile. json_schema.cpp holds the
// dispatch (keywords, $ref, composition, enum), json_schema_types.cpp the per-type grammars.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "structured/grammar_expr.h"
#include "structured/grammar_limits.h"
#include "structured/int_range.h"
#include "structured/json_grammar.h"

namespace nanovllm::structured {

using Json = nlohmann::ordered_json;  // keeps properties in schema order

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, GrammarBuilder& b, const GrammarLimits& limits,
                 const CompileDeadline& deadline);
  uint32_t compile();  // the root rule

 private:
  // `s` at JSON pointer `path` ("" for the root), `name` for the rules it makes.
  Expr schema_expr(const Json& s, const std::string& path, const std::string& name, uint32_t depth);
  // A new rule for `s` (every nested schema gets one, so Expr trees stay shallow).
  uint32_t schema_rule(const Json& s, const std::string& path, const std::string& name,
                       uint32_t depth);
  uint32_t ref_rule(const std::string& ref, const std::string& path);
  Expr enum_expr(const Json& s, const std::string& path);
  std::vector<std::string> types_of(const Json& s, const std::string& path);
  Expr type_expr(const std::string& type, const Json& s, const std::string& path,
                 const std::string& name, uint32_t depth);

  // json_schema_types.cpp
  Expr object_expr(const Json& s, const std::string& path, const std::string& name, uint32_t depth);
  Expr array_expr(const Json& s, const std::string& path, const std::string& name, uint32_t depth);
  Expr string_expr(const Json& s, const std::string& path);
  Expr integer_expr(const Json& s, const std::string& path);
  Expr number_expr(const Json& s, const std::string& path);
  // A non-negative integer keyword (minLength, maxItems, ...), at most max_repetition.
  std::optional<uint32_t> count_keyword(const Json& s, const char* key, const std::string& path);
  // The bounds of minimum / exclusiveMinimum (lower) or maximum / exclusiveMaximum (upper) as
  // the integers an integer may take (strict: an exclusive integral bound excluded; else
  // ceil / floor of either bound alike); nullopt if absent.
  std::optional<DecimalInt> integer_bound(const Json& s, bool lower, const std::string& path,
                                          bool strict = true);
  uint32_t define(const std::string& name, Expr body);

  const Json& root_;
  GrammarBuilder& b_;
  JsonRules json_;
  const GrammarLimits& limits_;
  const CompileDeadline& deadline_;
  std::map<std::string, uint32_t> ref_rules_;              // "$ref" value -> its rule
  std::vector<std::pair<uint32_t, std::string>> pending_;  // refs to compile: rule, pointer
};

// "at /properties/x" (or "at the root").
std::string at_path(const std::string& path);
// The JSON pointer of child `key` of `path` (escaping '~' and '/').
std::string child_path(const std::string& path, const std::string& key);
// The format's regex (date, time, date-time, uuid, email, ipv4), or nullopt.
std::optional<std::string> format_regex(const std::string& format);

}  // namespace nanovllm::structured
