// 50 kinds of bad requests against the real server: each gets the right 4xx and an OpenAI error
// object ({"error": {"message", "type", "param", "code"}}), and /health stays 200 after each.
#include <nlohmann/json.hpp>

#include "server/server_fixture.h"

namespace nanovllm {
namespace {

struct Case {
  std::string name;
  std::string method, target, body;
  int status;
  std::vector<std::pair<std::string, std::string>> headers = {};
};

TEST(ServerBadRequests, EachGetsTheRight4xxAndTheServerStaysHealthy) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--api-key", "sekret", "--max-model-len", "256",
                                     "--max-body-bytes", "1048576", "--kv-cache-memory", "8388608"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  const std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", "Bearer sekret"},
                                                                 {"Content-Type", "application/json"}};
  std::string long_prompt = "[";
  for (int i = 0; i < 300; ++i) {
    if (i) long_prompt += ",";
    long_prompt += std::to_string(100 + i);
  }
  long_prompt += "]";
  const std::string C = "/v1/completions", H = "/v1/chat/completions";
  std::vector<Case> cases = {
      {"not json", "POST", C, "this is not json", 400},
      {"truncated json", "POST", C, R"({"prompt": "hi", "max_tokens": )", 400},
      {"empty body", "POST", C, "", 400},
      {"array body", "POST", C, "[1, 2]", 400},
      {"no prompt", "POST", C, R"({"max_tokens": 4})", 400},
      {"prompt is a number", "POST", C, R"({"prompt": 5})", 400},
      {"empty prompt", "POST", C, R"({"prompt": ""})", 400},
      {"empty token prompt", "POST", C, R"({"prompt": []})", 400},
      {"token outside the vocab", "POST", C, R"({"prompt": [999999999]})", 400},
      {"negative token", "POST", C, R"({"prompt": [-1, 2]})", 400},
      {"mixed prompt list", "POST", C, R"({"prompt": ["a", 3]})", 400},
      {"max_tokens 0", "POST", C, R"({"prompt": "hi", "max_tokens": 0})", 400},
      {"max_tokens string", "POST", C, R"({"prompt": "hi", "max_tokens": "5"})", 400},
      {"max_tokens fraction", "POST", C, R"({"prompt": "hi", "max_tokens": 1.5})", 400},
      {"too many tokens", "POST", C, R"({"prompt": "hi", "max_tokens": 100000})", 400},
      {"prompt longer than max_model_len", "POST", C, R"({"prompt": )" + long_prompt + "}", 400},
      {"temperature negative", "POST", C, R"({"prompt": "hi", "temperature": -1})", 400},
      {"temperature string", "POST", C, R"({"prompt": "hi", "temperature": "hot"})", 400},
      {"top_p 0", "POST", C, R"({"prompt": "hi", "top_p": 0})", 400},
      {"top_p above 1", "POST", C, R"({"prompt": "hi", "top_p": 1.5})", 400},
      {"top_k -2", "POST", C, R"({"prompt": "hi", "top_k": -2})", 400},
      {"min_p 2", "POST", C, R"({"prompt": "hi", "min_p": 2})", 400},
      {"presence_penalty 3", "POST", C, R"({"prompt": "hi", "presence_penalty": 3})", 400},
      {"repetition_penalty 0", "POST", C, R"({"prompt": "hi", "repetition_penalty": 0})", 400},
      {"n 0", "POST", C, R"({"prompt": "hi", "n": 0})", 400},
      {"n huge", "POST", C, R"({"prompt": "hi", "n": 100000})", 400},
      {"logprobs 21", "POST", C, R"({"prompt": "hi", "logprobs": 21})", 400},
      {"stop is a number", "POST", C, R"({"prompt": "hi", "stop": 7})", 400},
      {"empty stop string", "POST", C, R"({"prompt": "hi", "stop": [""]})", 400},
      {"logit_bias bad key", "POST", C, R"({"prompt": "hi", "logit_bias": {"abc": 1}})", 400},
      {"logit_bias token outside the vocab", "POST", C, R"({"prompt": "hi", "logit_bias": {"999999999": 1}})", 400},
      {"seed string", "POST", C, R"({"prompt": "hi", "seed": "7"})", 400},
      {"ignore_eos string", "POST", C, R"({"prompt": "hi", "ignore_eos": "yes"})", 400},
      {"min_tokens above max_tokens", "POST", C, R"({"prompt": "hi", "max_tokens": 2, "min_tokens": 5})", 400},
      {"stream_options without stream", "POST", C, R"({"prompt": "hi", "stream_options": {"include_usage": true}})", 400},
      {"suffix", "POST", C, R"({"prompt": "hi", "suffix": "end"})", 400},
      {"invalid UTF-8", "POST", C, "{\"prompt\": \"\xff\xfe bad\"}", 400},
      {"unknown model", "POST", C, R"({"model": "gpt-9", "prompt": "hi"})", 404},
      {"chat without messages", "POST", H, R"({"max_tokens": 3})", 400},
      {"chat with empty messages", "POST", H, R"({"messages": []})", 400},
      {"chat bad role", "POST", H, R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400},
      {"chat content a number", "POST", H, R"({"messages": [{"role": "user", "content": 3}]})", 400},
      {"chat image part", "POST", H, R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", 400},
      {"chat top_logprobs without logprobs", "POST", H, R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", 400},
      {"chat malformed tools", "POST", H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})", 400},
      {"chat tool_choice required without tools", "POST", H, R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"})", 400},
      {"chat tool_choice required with response_format", "POST", H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f"}}]})", 400},
      {"response_format unknown type", "POST", H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}})", 400},
      {"response_format json_schema without schema", "POST", H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})", 400},
      {"json_schema unsupported keyword", "POST", H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": true}}}})", 400},
      {"json_schema unknown type", "POST", C, R"({"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "banana"}}}})", 400},
      {"structured_outputs regex that does not parse", "POST", C, R"({"prompt": "hi", "structured_outputs": {"regex": "(a"}})", 400},
      {"structured_outputs grammar undefined rule", "POST", C, R"({"prompt": "hi", "structured_outputs": {"grammar": "root ::= nothere"}})", 400},
      {"structured_outputs grammar left recursion", "POST", C, R"({"prompt": "hi", "structured_outputs": {"grammar": "root ::= root \"a\" | \"b\""}})", 400},
      {"structured_outputs two constraints", "POST", C, R"({"prompt": "hi", "structured_outputs": {"regex": "a", "choice": ["a"]}})", 400},
      {"structured_outputs unknown field", "POST", C, R"({"prompt": "hi", "structured_outputs": {"xml": "a"}})", 400},
      {"structured_outputs regex too large", "POST", C, R"({"prompt": "hi", "structured_outputs": {"regex": "a{100000}"}})", 400},
      {"structured_outputs choice of numbers", "POST", C, R"({"prompt": "hi", "structured_outputs": {"choice": [1, 2]}})", 400},
      {"wrong method", "GET", C, "", 405},
      {"unknown path", "GET", "/v1/engines", "", 404},
      {"detokenize a bad token", "POST", "/detokenize", R"({"tokens": [-5]})", 400},
      {"tokenize without a prompt", "POST", "/tokenize", R"({"text": "hi"})", 400},
      {"no API key", "POST", C, R"({"prompt": "hi"})", 401, {{"Content-Type", "application/json"}}},
      {"wrong API key", "POST", C, R"({"prompt": "hi"})", 401, {{"Authorization", "Bearer nope"}, {"Content-Type", "application/json"}}},
      {"wrong content type", "POST", C, R"({"prompt": "hi"})", 415, {{"Authorization", "Bearer sekret"}, {"Content-Type", "text/plain"}}},
      {"huge body", "POST", C, R"({"prompt": ")" + std::string(2 << 20, 'a') + "\"}", 413},
  };
  int checked = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    test::HttpResult r = test::http_call(port, c.method, c.target, c.body, c.headers.empty() ? auth : c.headers);
    EXPECT_EQ(r.status, c.status) << r.body;
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    const auto& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
    EXPECT_TRUE(e["type"].is_string()) << r.body;
    EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
    EXPECT_EQ(test::http_call(port, "GET", "/health", "", {}).status, 200);
    ++checked;
  }
  EXPECT_GE(checked, 50);
  // Broken HTTP itself: a garbage request line, a body shorter than its Content-Length, a huge header.
  std::string reply = test::raw_call(port, "BLAH\r\n\r\n");
  EXPECT_NE(reply.find("HTTP/1.1 400"), std::string::npos) << reply;
  EXPECT_NE(reply.find("\"error\""), std::string::npos) << reply;
  reply = test::raw_call(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n"
                               "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\": \"h");
  EXPECT_NE(reply.find("HTTP/1.1 400"), std::string::npos) << reply;
  reply = test::raw_call(port, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20 << 10, 'b') + "\r\n\r\n");
  EXPECT_NE(reply.find("HTTP/1.1 431"), std::string::npos) << reply.substr(0, 200);
  // Still serving, and the right key works.
  test::HttpResult ok = test::http_call(port, "POST", C, R"({"prompt": "hi", "max_tokens": 3})", auth);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(test::http_call(port, "GET", "/health", "", {}).status, 200);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace nanovllm
