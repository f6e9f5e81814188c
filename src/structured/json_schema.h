#pragma once
// JSON Schema (a draft 2020-12 subset) and "any JSON object" as grammar rules. The output is
// JSON with json_grammar.h's bounded whitespace. Supported:
//   type (a name or a list), enum, const, anyOf / oneOf (oneOf is treated as anyOf), allOf of one
//   schema, $ref to "#" and "#/<json pointer>" ($defs, definitions, ...; recursion allowed),
//   true / false schemas;
//   objects: properties (emitted in schema order; required ones always, optional ones may be
//   left out), required, additionalProperties, unevaluatedProperties;
//   arrays: items, prefixItems, minItems, maxItems, uniqueItems: false;
//   strings: minLength, maxLength, pattern (regex_parser.h; the whole string must match, which
//   implies the schema's search semantics), format date / time / date-time / uuid / email / ipv4;
//   integer / number: minimum, maximum, exclusiveMinimum, exclusiveMaximum;
//   annotations ($schema, $id, $comment, title, description, default, examples, ...) ignored.
// Choices where the standard leaves room (those of vLLM / xgrammar's strict mode):
//   - additionalProperties absent means false: only the listed properties (true: any extra key
//     with any value; a schema: extra keys with values of it; extra keys are any string, not
//     checked against the listed names). A required name missing from properties is emitted
//     with any value (Error if additionalProperties is explicitly false).
//   - items absent: any values without prefixItems, no further items with them.
//   - no type: inferred from the keywords present (properties -> object, items -> array,
//     minLength -> string, minimum -> number, ...), any JSON value if none.
//   - integers: exact for any bounds up to 10^30 in magnitude (larger bounds are clamped to
//     +-(10^30 - 1): a subset). Numbers with bounds: exact on integer values; fractional values
//     only those whose integer part's unit interval lies inside the bounds, written without
//     exponent and with 1 to 6 fraction digits, the last non-zero (a subset, e.g. minimum 0.5
//     allows 1.5 but not 0.7).
//   - enum / const values are written as compact JSON; with a type, values of other types are
//     dropped.
// Any other keyword (patternProperties, not, if, multipleOf, minProperties, uniqueItems: true,
// ...) or combination (pattern with minLength, anyOf beside type, ...) is an Error naming it and
// the schema path, as are bad values, remote $refs and limits (max_nesting_depth, ...).
#include <cstdint>
#include <string_view>

#include "structured/grammar_expr.h"
#include "structured/grammar_limits.h"

namespace nanovllm::structured {

// Returns the root rule.
uint32_t json_schema_rules(std::string_view schema_text, GrammarBuilder& builder,
                           const GrammarLimits& limits, const CompileDeadline& deadline);

// Any JSON value whose top level is an object.
uint32_t json_object_rules(GrammarBuilder& builder);

}  // namespace nanovllm::structured
