// JSON Schema and json_object grammars: what each keyword accepts and rejects (property order,
// optional properties, additionalProperties, arrays, strings, exact integer ranges, formats,
// $ref recursion, the whitespace policy), and the Error every unsupported keyword gets.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "structured/structured_test_util.h"

namespace nanovllm::structured {
namespace {

using test::accepts;
using test::schema;
using test::schema_error;

#define EXPECT_ERROR_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(JsonSchema, ObjectPropertiesInOrderOptionalOmitted) {
  const auto g = schema(R"js({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
      "required": ["name", "ok"]})js");
  EXPECT_TRUE(accepts(g, R"js({"name":"x","age":3,"ok":true})js"));
  EXPECT_TRUE(accepts(g, R"js({"name":"x","ok":false})js"));
  EXPECT_TRUE(accepts(g, "{ \"name\": \"\", \"ok\": true }"));
  EXPECT_TRUE(accepts(g, "{\n  \"name\": \"a\",\n  \"age\": -12,\n  \"ok\": true\n}"));
  EXPECT_FALSE(accepts(g, R"js({"age":3,"name":"x","ok":true})js"));  // schema order
  EXPECT_FALSE(accepts(g, R"js({"name":"x"})js"));                    // ok is required
  EXPECT_FALSE(
      accepts(g, R"js({"name":"x","ok":true,"z":1})js"));  // additionalProperties: false by default
  EXPECT_FALSE(accepts(g, R"js({"name":"x","age":3.5,"ok":true})js"));
  EXPECT_FALSE(accepts(g, R"js({"name":"x",,"ok":true})js"));
  EXPECT_FALSE(accepts(g, R"js({"name":"x","ok":true},)js"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  const auto g = schema(R"js({"type": "array", "items": {"type": "integer"}})js");
  EXPECT_TRUE(accepts(g, "[1, 2,3 ]"));
  EXPECT_TRUE(accepts(g, "[\n\t\t1,\n 2\n]"));
  EXPECT_TRUE(accepts(g, "[\n" + std::string(20, ' ') + "1]"));
  EXPECT_FALSE(accepts(g, "[\n" + std::string(21, ' ') + "1]"));  // at most 20 after a newline
  EXPECT_FALSE(accepts(g, "[  1]"));                              // one space, not two
  EXPECT_FALSE(accepts(g, " [1]"));                               // nothing before the value
  EXPECT_FALSE(accepts(g, "[1] "));                               // nor after it
}

TEST(JsonSchema, AdditionalProperties) {
  const auto any = schema(R"js({"type": "object", "properties": {"a": {"type": "integer"}},
                               "additionalProperties": true})js");
  EXPECT_TRUE(accepts(any, R"js({"a":1,"b":[null,{"c":"d"}],"e":2.5e3})js"));
  EXPECT_TRUE(accepts(any, R"js({"zz":1})js"));
  const auto typed =
      schema(R"js({"type": "object", "additionalProperties": {"type": "string"}})js");
  EXPECT_TRUE(accepts(typed, R"js({"x":"1","y":"2"})js"));
  EXPECT_FALSE(accepts(typed, R"js({"x":1})js"));
  EXPECT_TRUE(accepts(typed, "{}"));
  const auto required_extra = schema(R"js({"type": "object", "required": ["k"]})js");
  EXPECT_TRUE(accepts(required_extra, R"js({"k":[1]})js"));
  EXPECT_FALSE(accepts(required_extra, "{}"));
}

TEST(JsonSchema, EnumConstTypesAndComposition) {
  const auto e = schema(R"js({"enum": ["red", 3, null, {"a": [1]}]})js");
  for (const char* ok : {R"js("red")js", "3", "null", R"js({"a":[1]})js"})
    EXPECT_TRUE(accepts(e, ok)) << ok;
  EXPECT_FALSE(accepts(e, R"js("blue")js"));
  EXPECT_TRUE(accepts(schema(R"js({"const": "x\"y"})js"), R"js("x\"y")js"));
  EXPECT_TRUE(accepts(schema(R"js({"enum": ["a", 1], "type": "string"})js"), R"js("a")js"));
  EXPECT_FALSE(accepts(schema(R"js({"enum": ["a", 1], "type": "string"})js"), "1"));
  const auto types = schema(R"js({"type": ["string", "null"]})js");
  EXPECT_TRUE(accepts(types, "null"));
  EXPECT_TRUE(accepts(types, R"js("s")js"));
  EXPECT_FALSE(accepts(types, "1"));
  const auto any_of =
      schema(R"js({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "boolean"}}],
                                   "description": "annotations are ignored"})js");
  EXPECT_TRUE(accepts(any_of, "-7"));
  EXPECT_TRUE(accepts(any_of, "[true,false]"));
  EXPECT_FALSE(accepts(any_of, R"js("7")js"));
  EXPECT_TRUE(accepts(schema(R"js({"oneOf": [{"const": 1}, {"const": 2}]})js"), "2"));
  EXPECT_TRUE(accepts(schema(R"js({"allOf": [{"type": "boolean"}]})js"), "false"));
  EXPECT_TRUE(accepts(schema("true"), R"js({"a":[1,"b",null]})js"));
  EXPECT_TRUE(accepts(schema("{}"), "1.5e-3"));
}

TEST(JsonSchema, Arrays) {
  const auto bounded = schema(
      R"js({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})js");
  EXPECT_FALSE(accepts(bounded, "[1]"));
  EXPECT_TRUE(accepts(bounded, "[1,2]"));
  EXPECT_TRUE(accepts(bounded, "[1,2,3]"));
  EXPECT_FALSE(accepts(bounded, "[1,2,3,4]"));
  const auto tuple =
      schema(R"js({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})js");
  EXPECT_TRUE(accepts(tuple, "[]"));
  EXPECT_TRUE(accepts(tuple, R"js(["a"])js"));
  EXPECT_TRUE(accepts(tuple, R"js(["a",1])js"));
  EXPECT_FALSE(accepts(tuple, R"js(["a",1,2])js"));  // no items past the prefix by default
  EXPECT_FALSE(accepts(tuple, R"js([1,"a"])js"));
  const auto tuple_more = schema(R"js({"type": "array", "prefixItems": [{"type": "string"}],
                                       "items": {"type": "null"}, "minItems": 2})js");
  EXPECT_FALSE(accepts(tuple_more, R"js(["a"])js"));
  EXPECT_TRUE(accepts(tuple_more, R"js(["a",null,null])js"));
  EXPECT_TRUE(accepts(schema(R"js({"type": "array", "maxItems": 0})js"), "[]"));
  EXPECT_TRUE(accepts(schema(R"js({"type": "array"})js"), R"js([1,"x",[]])js"));
  EXPECT_FALSE(accepts(
      schema(R"js({"type": "array", "prefixItems": [{}, {}, {}], "maxItems": 2})js"), "[1,2,3]"));
}

TEST(JsonSchema, Strings) {
  const auto len = schema(R"js({"type": "string", "minLength": 2, "maxLength": 3})js");
  EXPECT_FALSE(accepts(len, R"js("a")js"));
  EXPECT_TRUE(accepts(len, R"js("ab")js"));
  EXPECT_TRUE(accepts(len, "\"\xC3\xA9\\n\\u00e9\""));  // é, an escape, a \u escape: 3 characters
  EXPECT_FALSE(accepts(len, R"js("abcd")js"));
  const auto s = schema(R"js({"type": "string"})js");
  EXPECT_TRUE(accepts(s, R"js("a\"b\\c\/\b\f\n\r\t\u12aF")js"));
  EXPECT_FALSE(accepts(s, "\"a\nb\""));  // raw control characters must be escaped
  EXPECT_FALSE(accepts(s, R"js("\x")js"));
  EXPECT_FALSE(accepts(s, R"js("\ud800")js"));  // surrogate escapes are left out
  const auto pattern = schema(R"js({"type": "string", "pattern": "^a\"b[0-9]+\\.$"})js");
  EXPECT_TRUE(accepts(pattern, R"js("a\"b12.")js"));  // the pattern's " is written escaped
  EXPECT_FALSE(accepts(pattern, R"js("a"b12.")js"));
  EXPECT_FALSE(accepts(pattern, R"js("a\"b.")js"));
  const auto newline = schema(R"js({"type": "string", "pattern": "a\nb"})js");
  EXPECT_TRUE(accepts(newline, R"js("a\nb")js"));
}

TEST(JsonSchema, Formats) {
  const auto date = schema(R"js({"type": "string", "format": "date"})js");
  EXPECT_TRUE(accepts(date, R"js("2024-02-29")js"));
  EXPECT_TRUE(accepts(date, R"js("2000-02-29")js"));
  EXPECT_TRUE(accepts(date, R"js("1999-12-31")js"));
  EXPECT_FALSE(accepts(date, R"js("2023-02-29")js"));
  EXPECT_FALSE(accepts(date, R"js("1900-02-29")js"));
  EXPECT_FALSE(accepts(date, R"js("2023-04-31")js"));
  EXPECT_FALSE(accepts(date, R"js("2023-13-01")js"));
  EXPECT_FALSE(accepts(date, R"js("0000-01-01")js"));
  const auto dt = schema(R"js({"type": "string", "format": "date-time"})js");
  EXPECT_TRUE(accepts(dt, R"js("2024-01-02T03:04:05Z")js"));
  EXPECT_TRUE(accepts(dt, R"js("2024-01-02T23:59:59.123+05:30")js"));
  EXPECT_FALSE(accepts(dt, R"js("2024-01-02T24:00:00Z")js"));
  EXPECT_TRUE(
      accepts(schema(R"js({"type": "string", "format": "time"})js"), R"js("12:00:00-01:00")js"));
  EXPECT_TRUE(accepts(schema(R"js({"type": "string", "format": "uuid"})js"),
                      R"js("123e4567-e89b-12d3-a456-426614174000")js"));
  EXPECT_TRUE(accepts(schema(R"js({"type": "string", "format": "email"})js"),
                      R"js("a.b+c@x-y.example.org")js"));
  EXPECT_FALSE(accepts(schema(R"js({"type": "string", "format": "email"})js"), R"js("a@b")js"));
  EXPECT_TRUE(
      accepts(schema(R"js({"type": "string", "format": "ipv4"})js"), R"js("255.0.10.99")js"));
  EXPECT_FALSE(
      accepts(schema(R"js({"type": "string", "format": "ipv4"})js"), R"js("256.0.0.1")js"));
}

// Every integer in [-1200, 1200] is accepted iff it lies in the range (exclusive bounds too),
// written without leading zeros and never as -0.
TEST(JsonSchema, IntegerRangesAreExact) {
  struct Range {
    const char* keywords;
    long lo, hi;  // the integers allowed
  };
  const Range ranges[] = {
      {R"js("minimum": 0, "maximum": 100)js", 0, 100},
      {R"js("minimum": -37, "maximum": 1005)js", -37, 1005},
      {R"js("exclusiveMinimum": -100, "exclusiveMaximum": -3)js", -99, -4},
      {R"js("minimum": 7.5, "maximum": 19.9)js", 8, 19},
      {R"js("minimum": 99)js", 99, 1L << 40},
      {R"js("maximum": -1)js", -(1L << 40), -1},
      {R"js("minimum": 1, "exclusiveMinimum": 5, "maximum": 10)js", 6, 10},
  };
  for (const Range& r : ranges) {
    const auto g = schema(fmt::format(R"js({{"type": "integer", {}}})js", r.keywords));
    for (long v = -1200; v <= 1200; ++v) {
      ASSERT_EQ(accepts(g, std::to_string(v)), v >= r.lo && v <= r.hi) << r.keywords << " " << v;
    }
    EXPECT_FALSE(accepts(g, "-0"));
    EXPECT_FALSE(accepts(g, "007"));
  }
  const auto big = schema(
      R"js({"type": "integer", "minimum": -9223372036854775808, "maximum": 18446744073709551615})js");
  EXPECT_TRUE(accepts(big, "-9223372036854775808"));
  EXPECT_TRUE(accepts(big, "18446744073709551615"));
  EXPECT_FALSE(accepts(big, "-9223372036854775809"));
  EXPECT_FALSE(accepts(big, "18446744073709551616"));
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "integer", "minimum": 5, "maximum": 4})js"),
                   "matches no string");
}

TEST(JsonSchema, NumberRanges) {
  const auto g = schema(R"js({"type": "number", "minimum": -2.5, "exclusiveMaximum": 3})js");
  for (const char* ok : {"-2", "0", "2", "-1.5", "2.999", "0.000001", "-0.5"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"3", "-3", "3.5", "-2.75", "1e2", "2.10", "1.0000001"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
  const auto plain = schema(R"js({"type": "number"})js");
  for (const char* ok : {"0", "-0.5", "12e3", "1.5E+2", "-7e-9"})
    EXPECT_TRUE(accepts(plain, ok)) << ok;
  for (const char* bad : {"01", ".5", "1.", "+1", "1e", "NaN"})
    EXPECT_FALSE(accepts(plain, bad)) << bad;
}

TEST(JsonSchema, RecursiveRef) {
  const auto tree = schema(R"js({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})js");
  EXPECT_TRUE(accepts(tree, R"js({"v":1})js"));
  EXPECT_TRUE(accepts(tree, R"js({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4}]}]})js"));
  EXPECT_FALSE(accepts(tree, R"js({"v":1,"kids":[{"kids":[]}]})js"));
  const auto self =
      schema(R"js({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}})js");
  EXPECT_TRUE(accepts(self, "[1,[2,[[]]],3]"));
  const auto escaped =
      schema(R"js({"definitions": {"a/b~c": {"const": 1}}, "$ref": "#/definitions/a~1b~0c"})js");
  EXPECT_TRUE(accepts(escaped, "1"));
}

TEST(JsonSchema, JsonObject) {
  const auto g = compile_grammar({GrammarSpec::Kind::kJsonObject, "", {}});
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_TRUE(accepts(g, R"js({"a": [1, {"b": null}], "c": "\u00e9", "d": -1.5e3, "e": true})js"));
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, "1"));
  EXPECT_FALSE(accepts(g, R"js({"a":})js"));
  EXPECT_FALSE(accepts(g, R"js({a: 1})js"));
}

TEST(JsonSchema, Errors) {
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "object", "patternProperties": {}})js"),
                   "unsupported keyword 'patternProperties' at the root");
  EXPECT_ERROR_HAS(schema_error(R"js({"properties": {"a": {"not": {}}}})js"),
                   "unsupported keyword 'not' at /properties/a");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "number", "multipleOf": 2})js"), "'multipleOf'");
  EXPECT_ERROR_HAS(schema_error(R"js({"allOf": [{}, {}]})js"), "allOf");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "object", "anyOf": [{}]})js"),
                   "keyword 'type' beside 'anyOf'");
  EXPECT_ERROR_HAS(schema_error(R"js({"$ref": "http://x/y.json"})js"), "only local references");
  EXPECT_ERROR_HAS(schema_error(R"js({"$ref": "#/$defs/missing"})js"), "points to nothing");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "strin"})js"), "unknown type 'strin'");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "string", "format": "hostname"})js"),
                   "format 'hostname'");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "array", "uniqueItems": true})js"), "uniqueItems");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "string", "minLength": 3, "maxLength": 2})js"),
                   "minLength");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "string", "pattern": "a+", "maxLength": 2})js"),
                   "beside pattern");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "string", "pattern": "(a"})js"),
                   "pattern at the root");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "string", "maxLength": 1000000})js"),
                   "max_repetition");
  // Above INT64_MAX: too large (the limit), not negative.
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "array", "maxItems": 18446744073709551615})js"),
                   "max_repetition");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "string", "minLength": -1})js"), "non-negative");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "integer", "minLength": 1})js"),
                   "'minLength' does not apply");
  EXPECT_ERROR_HAS(schema_error(R"js({"enum": []})js"), "enum");
  EXPECT_ERROR_HAS(
      schema_error(R"js({"type": "object", "additionalProperties": false, "required": ["x"]})js"),
      "required property 'x'");
  EXPECT_ERROR_HAS(schema_error(R"js({"type": "array", "items": [{}]})js"), "prefixItems");
  EXPECT_ERROR_HAS(schema_error("{"), "not valid JSON");
  EXPECT_ERROR_HAS(schema_error("false"), "matches no string");
  EXPECT_ERROR_HAS(schema_error("[1]"), "not an object or a boolean");
  std::string deep = "{}";
  for (int i = 0; i < 300; ++i) deep = R"js({"type": "array", "items": )js" + deep + "}";
  EXPECT_ERROR_HAS(schema_error(deep), "max_nesting_depth");
  std::string deep_valid;  // valid JSON nested 100000 deep: parsed and freed without recursion
  for (int i = 0; i < 100000; ++i) deep_valid += R"js({"items":)js";
  deep_valid += "{}" + std::string(100000, '}');
  EXPECT_ERROR_HAS(schema_error(deep_valid), "max_nesting_depth");
  std::string deep_json(100000, '[');  // the JSON parser itself must not overflow the stack
  EXPECT_ERROR_HAS(schema_error(deep_json), "json_schema: ");
  EXPECT_EQ(schema_error("{").rfind("json_schema: ", 0), 0u);
}

TEST(JsonSchema, RandomSchemasCompileOrFailCleanly) {
  const std::vector<std::string> pieces = {"{",
                                           "}",
                                           "[",
                                           "]",
                                           ",",
                                           ":",
                                           "\"type\"",
                                           "\"object\"",
                                           "\"array\"",
                                           "\"string\"",
                                           "\"integer\"",
                                           "\"number\"",
                                           "\"properties\"",
                                           "\"items\"",
                                           "\"required\"",
                                           "\"a\"",
                                           "\"$ref\"",
                                           "\"#\"",
                                           "\"#/$defs/a\"",
                                           "\"$defs\"",
                                           "\"anyOf\"",
                                           "\"enum\"",
                                           "\"minimum\"",
                                           "\"maxLength\"",
                                           "\"pattern\"",
                                           "\"a+\"",
                                           "1",
                                           "-2.5",
                                           "true",
                                           "null",
                                           "\"minItems\"",
                                           "\"prefixItems\"",
                                           "\"additionalProperties\"",
                                           "{\"type\": \"string\"}",
                                           "{\"$ref\": \"#\"}"};
  test::fuzz_compile(GrammarSpec::Kind::kJsonSchema, pieces, 2000, 13);  // mostly invalid JSON
  // Random well-formed schemas: random keywords with plausible (and implausible) values.
  std::mt19937 rng(14);
  std::function<nlohmann::json(int)> random_schema = [&](int depth) -> nlohmann::json {
    const char* keys[] = {"type",      "properties",  "items",
                          "required",  "enum",        "const",
                          "anyOf",     "minimum",     "exclusiveMaximum",
                          "maxLength", "minLength",   "pattern",
                          "format",    "$ref",        "minItems",
                          "maxItems",  "prefixItems", "additionalProperties",
                          "allOf",     "title",       "multipleOf"};
    const char* types[] = {"object", "array",   "string", "integer",
                           "number", "boolean", "null",   "nope"};
    if (depth > 3 || rng() % 6 == 0)
      return rng() % 2 ? nlohmann::json(true) : nlohmann::json::object();
    nlohmann::json s = nlohmann::json::object();
    for (int k = 0, n = int(rng() % 4); k < n; ++k) {
      const std::string key = keys[rng() % std::size(keys)];
      const int r = int(rng() % 4);
      if (key == "type") {
        s[key] = r == 0 ? nlohmann::json::array({types[rng() % 8], "null"})
                        : nlohmann::json(types[rng() % 7]);
      } else if (key == "properties") {
        s[key] = {{"a", random_schema(depth + 1)}, {"b", random_schema(depth + 1)}};
      } else if (key == "items" || key == "additionalProperties") {
        s[key] = r == 0 ? nlohmann::json(false) : random_schema(depth + 1);
      } else if (key == "anyOf" || key == "prefixItems" || key == "allOf") {
        s[key] = nlohmann::json::array();
        for (int i = 0; i <= r; ++i) s[key].push_back(random_schema(depth + 1));
      } else if (key == "required") {
        s[key] = r == 0 ? nlohmann::json::array({"a", "c"}) : nlohmann::json::array({"b"});
      } else if (key == "enum") {
        s[key] = nlohmann::json::array({1, "x", nullptr, nlohmann::json::array({2})});
      } else if (key == "const") {
        s[key] = r == 0 ? nlohmann::json("y") : nlohmann::json(-3);
      } else if (key == "pattern") {
        s[key] = r == 0 ? "[a-c]{1,3}" : r == 1 ? "(x|\\d)+" : "(";
      } else if (key == "format") {
        s[key] = r == 0 ? "date" : r == 1 ? "uuid" : "hostname";
      } else if (key == "$ref") {
        s[key] = r == 0 ? "#" : "#/properties/a";
      } else {
        s[key] = r == 0   ? nlohmann::json(-5)
                 : r == 1 ? nlohmann::json(2.5)
                          : nlohmann::json(int(rng() % 20));
      }
    }
    return s;
  };
  int compiled = 0;
  for (int i = 0; i < 1500; ++i) {
    const std::string text = random_schema(0).dump();
    compiled += test::fuzz_compile_one(GrammarSpec::Kind::kJsonSchema, text, rng);
  }
  EXPECT_GT(compiled, 100);
}

TEST(Choice, ExactlyOneString) {
  const auto g = test::choice({"a", "ab", "caf\xC3\xA9"});
  EXPECT_TRUE(accepts(g, "a"));
  EXPECT_TRUE(accepts(g, "ab"));
  EXPECT_TRUE(accepts(g, "caf\xC3\xA9"));
  EXPECT_FALSE(accepts(g, "abc"));
  EXPECT_FALSE(accepts(g, ""));
  EXPECT_NE(test::compile_error({GrammarSpec::Kind::kChoice, "", {}})
                .find("choice: the choice list is empty"),
            std::string::npos);
}

}  // namespace
}  // namespace nanovllm::structured
