// decode_json (src/server/json_decoder.h): the same tree as nlohmann's ordered_json parser (key
// order, duplicate keys, numbers, unicode), and each JsonLimits limit refused with a 400 that
// names it and the top-level field it was met in.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/api_error.h"
#include "server/json_decoder.h"

namespace nanovllm::server {
namespace {

using Json = nlohmann::ordered_json;

// Appends `"key":value` to s (with a comma unless first). Piece by piece: g++ 12 warns
// (-Wrestrict, falsely) on `"literal" + std::string` chains.
void add_member(std::string& s, bool first, const std::string& key, const char* value) {
  if (!first) s += ',';
  s += '"';
  s += key;
  s += "\":";
  s += value;
}

// A random JSON text: nested objects (with repeated keys) and arrays of every scalar type.
std::string random_json(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth > 4 ? 5 : 7);
  switch (pick(rng)) {
    case 0: return "null";
    case 1: return rng() % 2 ? "true" : "false";
    case 2: return std::to_string(int64_t(rng()) - int64_t(1u << 31));
    case 3: return std::to_string(uint64_t(rng()) << 32 | rng());
    case 4: {
      std::string x = std::to_string(double(rng()) / 7.0);
      x += 'e';
      x += std::to_string(int(rng() % 40) - 20);
      return x;
    }
    case 5: {
      static const char* kStrings[] = {"\"\"", "\"a\"", "\"\\u00e9t\\u00e9\"", "\"\\ud83d\\ude00\"", "\"x\\ny\\t\\\"\""};
      return kStrings[rng() % 5];
    }
    case 6: {
      std::string s = "[";
      for (int i = 0, n = int(rng() % 5); i < n; ++i) {
        if (i) s += ',';
        s += random_json(rng, depth + 1);
      }
      return s + "]";
    }
    default: {
      std::string s = "{";
      for (int i = 0, n = int(rng() % 6); i < n; ++i) {
        if (i) s += ',';
        s += "\"k";
        s += std::to_string(rng() % 4);
        s += "\":";
        s += random_json(rng, depth + 1);
      }
      return s + "}";
    }
  }
}

TEST(JsonDecoder, GivesTheTreeOfOrderedJsonParse) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = random_json(rng, 0);
    Json want = Json::parse(text);
    Json got = decode_json(text, JsonLimits{});
    ASSERT_EQ(got, want) << text;
    ASSERT_EQ(got.dump(), want.dump()) << text;  // the same key order, not only equal
  }
}

TEST(JsonDecoder, KeepsKeyOrderAndResolvesDuplicatesAsNlohmann) {
  const std::string text = R"({"z": 1, "a": {"y": [1, {"q": 2, "b": 3}], "c": null}, "m": "s", "a": 5, "z": 7})";
  Json got = decode_json(text, JsonLimits{});
  EXPECT_EQ(got.dump(), R"({"z":7,"a":5,"m":"s"})");  // first place, last value
  EXPECT_EQ(got.dump(), Json::parse(text).dump());
}

TEST(JsonDecoder, ManyKeysAreAcceptedUpToTheLimitInLinearTime) {
  // 4096 keys in each of 200 objects (about 6 MB): nlohmann's ordered parse would compare
  // 200 * 4096^2 / 2 = 1.7e9 keys; here it is a sort per object.
  std::string text = "[";
  for (int o = 0; o < 200; ++o) {
    text += o ? ",{" : "{";
    for (int k = 0; k < 4096; ++k) add_member(text, k == 0, std::to_string(k * 7919 % 4096), "1");
    text += "}";
  }
  text += "]";
  Json got = decode_json(text, JsonLimits{});
  ASSERT_EQ(got.size(), 200u);
  EXPECT_EQ(got[199].size(), 4096u);
  EXPECT_EQ(got[199].begin().key(), "0");
  EXPECT_EQ((++got[199].begin()).key(), std::to_string(7919 % 4096));
}

// The ApiError of decoding `text` under `limits` (status 0 when it decodes).
ApiError error_of(const std::string& text, const JsonLimits& limits = {}) {
  try {
    decode_json(text, limits);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "");
}

TEST(JsonDecoder, EachLimitIsRefusedNamingItAndTheField) {
  JsonLimits small;
  small.max_depth = 4;
  small.max_object_keys = 3;
  small.max_array_length = 5;
  small.max_string_bytes = 8;
  small.max_values = 20;
  struct Case {
    std::string text, message, param;
  };
  const Case cases[] = {
      {R"({"a": [[[[1]]]]})", "nest deeper than 4 levels", "a"},
      {R"({"ok": 1, "bias": {"1": 1, "2": 2, "3": 3, "4": 4}})", "more than 3 keys", "bias"},
      {R"({"a": 1, "b": 2, "c": 3, "d": 4})", "more than 3 keys", ""},  // the body itself
      {R"({"prompt": [1, 2, 3, 4, 5, 6]})", "more than 5 elements", "prompt"},
      {R"({"prompt": "123456789"})", "longer than 8 bytes", "prompt"},
      {R"({"123456789": 1})", "longer than 8 bytes", ""},
      {R"({"a": [1, 2, 3, 4, 5], "b": [1, 2, 3, 4, 5], "c": [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]]})", "more than 20 JSON values", "c"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    ApiError e = error_of(c.text, small);
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the server's limit"), std::string::npos) << e.what();
    EXPECT_EQ(e.param, c.param);
  }
  // At each limit exactly: accepted.
  EXPECT_EQ(error_of(R"({"a": [[[1]]]})", small).status, 0);
  EXPECT_EQ(error_of(R"({"a": 1, "b": 2, "c": 3})", small).status, 0);
  EXPECT_EQ(error_of(R"([1, 2, 3, 4, 5])", small).status, 0);
  EXPECT_EQ(error_of(R"(["12345678"])", small).status, 0);
}

TEST(JsonDecoder, HostileBodiesAreRefusedEarly) {
  // 150,000 logit_bias entries (3 MB), 1,000,000 nested arrays, 2,000,000 values.
  std::string bias = R"({"prompt": "hi", "logit_bias": {)";
  for (int i = 0; i < 150000; ++i) add_member(bias, i == 0, std::to_string(i), "1");
  bias += "}}";
  ApiError e = error_of(bias);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "logit_bias");
  EXPECT_NE(std::string(e.what()).find("more than 4096 keys"), std::string::npos) << e.what();
  e = error_of(std::string(1000000, '[') + std::string(1000000, ']'));
  EXPECT_NE(std::string(e.what()).find("deeper than 64 levels"), std::string::npos) << e.what();
  std::string zeros = "[0";
  for (int i = 1; i < 2000000; ++i) zeros += ",0";
  e = error_of(zeros + "]");
  EXPECT_NE(std::string(e.what()).find("more than 262144 elements"), std::string::npos) << e.what();
}

TEST(JsonDecoder, InvalidJsonSaysWhere) {
  for (const char* text : {"", "{", "{\"a\": }", "[1, 2,]", "{\"a\": 1} x", "\"\xff\"", "1e999", "nan"}) {
    SCOPED_TRACE(text);
    ApiError e = error_of(text);
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_NE(std::string(error_of("{\"a\": }").what()).find("column"), std::string::npos);
}

}  // namespace
}  // namespace nanovllm::server
