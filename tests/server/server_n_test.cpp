// n > 1 through the server: one engine request per prompt, its n samples sharing the prompt's KV
// blocks (read from /metrics), choices 0..n-1 whole or streamed with their index, usage counting
// the prompt once and every choice's tokens, and stop strings applied to each choice alone.
#include <fmt/format.h>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "server/server_fixture.h"

namespace nanovllm {
namespace {

using Json = nlohmann::json;

double metric(int port, const std::string& name) {
  const std::string text = test::http_call(port, "GET", "/metrics", "", {}).body;
  const std::string key = "\nnanovllm:" + name + "{";
  size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::atof(text.c_str() + text.find('}', at) + 2);
}

// The JSON chunks of an SSE body, which must end with "data: [DONE]".
std::vector<Json> sse_chunks(const std::string& body) {
  std::vector<Json> out;
  size_t at = 0;
  bool done = false;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    size_t end = body.find("\n\n", at);
    std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    EXPECT_FALSE(done) << "a chunk after [DONE]";
    out.push_back(Json::parse(data));
  }
  EXPECT_TRUE(done) << body.substr(0, 300);
  return out;
}

struct StreamedChoice {
  std::string text;
  int num_tokens = 0;  // from logprobs
  int num_finishes = 0;
  Json finish_reason, stop_reason;
};

// Streamed completions choices by index; the usage chunk (include_usage) in *usage.
std::map<int, StreamedChoice> collect(const std::string& body, Json* usage) {
  std::map<int, StreamedChoice> out;
  for (const Json& c : sse_chunks(body)) {
    if (c.contains("usage") && !c["usage"].is_null()) *usage = c["usage"];
    for (const Json& ch : c["choices"]) {
      StreamedChoice& s = out[ch["index"].get<int>()];
      s.text += ch["text"].get<std::string>();
      if (ch["logprobs"].is_object()) s.num_tokens += int(ch["logprobs"]["tokens"].size());
      if (!ch["finish_reason"].is_null()) {
        ++s.num_finishes;
        s.finish_reason = ch["finish_reason"];
        s.stop_reason = ch["stop_reason"];
      }
    }
  }
  return out;
}

std::string prompt_tokens(int len) {
  std::string p = "[";
  for (int i = 0; i < len; ++i) {
    if (i) p += ',';
    p += std::to_string(500 + 3 * i);
  }
  return p + "]";
}

// A piece of `text` of about 2 code points from its middle, whole UTF-8 characters only.
std::string middle_piece(const std::string& text) {
  auto boundary = [&](size_t i) {
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  size_t b = boundary(text.size() / 2);
  size_t e = boundary(boundary(b + 1) + 1);
  return text.substr(b, e - b);
}

TEST(ServerN, ChoicesShareThePromptAndAddUp) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--kv-cache-memory", "16777216", "--max-model-len", "1024"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  // 40 prompt tokens: 2 full blocks of 16.
  const std::string body = R"({"prompt": )" + prompt_tokens(40) +
                           R"(, "n": 3, "max_tokens": 10, "temperature": 1, "seed": 11, "logprobs": 0)";
  auto r = test::http_call(port, "POST", "/v1/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(metric(port, "prefix_cache_hits_total"), 2 * 2 * 16)
      << "the 2 siblings found sample 0's 2 full prompt blocks";
  EXPECT_EQ(metric(port, "prompt_tokens_total"), 40) << "the prompt is computed once";
  Json whole = Json::parse(r.body);
  ASSERT_EQ(whole["choices"].size(), 3u);
  int sum = 0;
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    const Json& c = whole["choices"][size_t(i)];
    EXPECT_EQ(c["index"], i);
    EXPECT_TRUE(c["finish_reason"] == "length" || c["finish_reason"] == "stop") << c;
    sum += int(c["logprobs"]["tokens"].size());
    texts.insert(c["text"].get<std::string>());
  }
  EXPECT_GT(texts.size(), 1u) << "the samples differ";
  EXPECT_EQ(whole["usage"]["completion_tokens"], sum);
  EXPECT_EQ(whole["usage"]["prompt_tokens"], 40);
  EXPECT_EQ(whole["usage"]["total_tokens"], 40 + sum);

  // Streamed: the same choices (same seed), each chunk naming its index, one finish per choice.
  auto s = test::http_call(port, "POST", "/v1/completions",
                           body + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(s.status, 200) << s.body;
  Json usage;
  std::map<int, StreamedChoice> streamed = collect(s.body, &usage);
  ASSERT_EQ(streamed.size(), 3u);
  int streamed_sum = 0;
  for (int i = 0; i < 3; ++i) {
    const Json& c = whole["choices"][size_t(i)];
    EXPECT_EQ(streamed[i].text, c["text"]) << i;
    EXPECT_EQ(streamed[i].num_finishes, 1) << i;
    EXPECT_EQ(streamed[i].finish_reason, c["finish_reason"]) << i;
    streamed_sum += streamed[i].num_tokens;
  }
  EXPECT_EQ(streamed_sum, sum);
  EXPECT_EQ(usage["completion_tokens"], sum);
  EXPECT_EQ(usage["prompt_tokens"], 40);

  // Two prompts with n = 2: choices 0..3, prompt p's samples at 2p and 2p + 1.
  auto two = test::http_call(port, "POST", "/v1/completions",
                             R"({"prompt": [[1, 2, 3], [4, 5, 6, 7]], "n": 2, "max_tokens": 4, "ignore_eos": true})");
  ASSERT_EQ(two.status, 200) << two.body;
  Json tj = Json::parse(two.body);
  ASSERT_EQ(tj["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(tj["choices"][size_t(i)]["index"], i);
  EXPECT_EQ(tj["usage"]["prompt_tokens"], 3 + 4);
  EXPECT_EQ(tj["usage"]["completion_tokens"], 4 * 4);

  // Stop strings per choice: a piece of choice 1's text stops choice 1 there, and any other choice
  // whose text holds it; the rest run on.
  const std::string stop = middle_piece(whole["choices"][1]["text"].get<std::string>());
  ASSERT_FALSE(stop.empty());
  Json stopped_req = Json::parse(body + "}");
  stopped_req["stop"] = Json::array({stop});
  for (bool stream : {false, true}) {
    stopped_req["stream"] = stream;
    auto st = test::http_call(port, "POST", "/v1/completions", stopped_req.dump());
    ASSERT_EQ(st.status, 200) << st.body;
    std::map<int, StreamedChoice> got;
    if (stream) {
      Json ignored;
      got = collect(st.body, &ignored);
    } else {
      const Json parsed = Json::parse(st.body);
      for (const Json& c : parsed["choices"]) {
        StreamedChoice& g = got[c["index"].get<int>()];
        g.text = c["text"];
        g.finish_reason = c["finish_reason"];
        g.stop_reason = c["stop_reason"];
      }
    }
    ASSERT_EQ(got.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      const std::string full = whole["choices"][size_t(i)]["text"];
      const size_t at = full.find(stop);
      SCOPED_TRACE("stream " + std::to_string(stream) + " choice " + std::to_string(i) + " stop '" + stop + "'");
      if (at == std::string::npos) {
        EXPECT_EQ(got[i].text, full);
        EXPECT_EQ(got[i].finish_reason, whole["choices"][size_t(i)]["finish_reason"]);
      } else {
        EXPECT_EQ(got[i].text, full.substr(0, at));
        EXPECT_EQ(got[i].finish_reason, "stop");
        EXPECT_EQ(got[i].stop_reason, stop);
      }
    }
    EXPECT_NE(whole["choices"][1]["text"].get<std::string>().find(stop), std::string::npos);
  }
  // Everything freed.
  EXPECT_EQ(metric(port, "num_requests_running"), 0);
  EXPECT_EQ(metric(port, "kv_cache_usage_perc"), 0);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

TEST(ServerN, ADisconnectedStreamAbortsEverySample) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--kv-cache-memory", "16777216", "--max-model-len", "2048"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  auto num_aborted = [&] {
    const std::string text = test::http_call(port, "GET", "/metrics", "", {}).body;
    const std::string key = "finished_reason=\"abort\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? -1.0 : std::atof(text.c_str() + at + key.size());
  };
  ASSERT_EQ(num_aborted(), 0);
  {
    namespace net = boost::asio;
    net::io_context ioc;
    net::ip::tcp::socket sock(ioc);
    sock.connect({net::ip::make_address("127.0.0.1"), uint16_t(port)});
    const std::string body = R"({"prompt": )" + prompt_tokens(40) +
                             R"(, "n": 3, "max_tokens": 1900, "ignore_eos": true, "stream": true})";
    std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    request += fmt::format("Content-Length: {}\r\n\r\n", body.size());
    request += body;
    net::write(sock, net::buffer(request));
    // Read until every sample runs (3 sequences), then hang up.
    std::string got;
    char buf[4096];
    for (int i = 0; i < 2000 && metric(port, "num_requests_running") < 3; ++i) {
      got.append(buf, sock.read_some(net::buffer(buf)));
    }
    ASSERT_EQ(metric(port, "num_requests_running"), 3) << got.substr(0, 300);
    EXPECT_GT(metric(port, "kv_cache_usage_perc"), 0);
  }  // closed
  double running = -1, usage = -1;
  for (int i = 0; i < 100; ++i) {  // within 1 s
    running = metric(port, "num_requests_running");
    usage = metric(port, "kv_cache_usage_perc");
    if (running == 0 && usage == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(running, 0);
  EXPECT_EQ(usage, 0) << "every block freed";
  EXPECT_EQ(num_aborted(), 3) << "each sample ends with abort";
  EXPECT_EQ(test::http_call(port, "GET", "/health", "", {}).status, 200);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace nanovllm
