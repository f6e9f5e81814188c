// The server's plumbing: /metrics (vLLM's names), /tokenize and /detokenize, the chat page, a
// non-streaming client that disconnects is aborted, SIGTERM lets running requests finish (or
// aborts them after the grace period) and exits 0, a model that fails to load exits 1.
#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "server/server_fixture.h"

namespace nanovllm {
namespace {

double metric(const std::string& text, const std::string& name, const std::string& extra_label = "") {
  const std::string key = "nanovllm:" + name + "{";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    if (at > 0 && text[at - 1] != '\n') continue;
    size_t close = text.find('}', at);
    std::string labels = text.substr(at + key.size(), close - at - key.size());
    if (!extra_label.empty() && labels.find(extra_label) == std::string::npos) continue;
    return std::atof(text.c_str() + close + 2);
  }
  return -1;
}

std::string metrics(int port) { return test::http_call(port, "GET", "/metrics", "", {}).body; }

// Waits up to `seconds` for no request running or waiting; returns the seconds it took or -1.
double wait_idle(int port, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) {
    std::string m = metrics(port);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (metric(m, "num_requests_running") == 0 && metric(m, "num_requests_waiting") == 0 &&
        metric(m, "kv_cache_free_blocks") == metric(m, "kv_cache_total_blocks")) {
      return took;
    }
    if (took > seconds) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string streaming_request(int max_tokens) {
  std::string body = R"({"prompt": [5, 6, 7], "ignore_eos": true, "stream": true, "max_tokens": )" +
                     std::to_string(max_tokens) + "}";
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(ServerLifecycle, MetricsTokenizeChatPageAndDisconnect) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--kv-cache-memory", "16777216", "--max-model-len", "1024"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  // The same 40-token prompt twice: the second finds 2 full blocks in the prefix cache.
  std::string prompt = "[";
  for (int i = 0; i < 40; ++i) {
    if (i) prompt += ",";
    prompt += std::to_string(300 + i);
  }
  prompt += "]";
  for (int k = 0; k < 2; ++k) {
    auto r = test::http_call(port, "POST", "/v1/completions", R"({"prompt": )" + prompt + R"(, "max_tokens": 4, "ignore_eos": true})");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  std::string m = metrics(port);
  for (const char* name : {"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                           "prefix_cache_queries_total", "prefix_cache_hits_total", "num_preemptions_total",
                           "prompt_tokens_total", "generation_tokens_total", "request_success_total"}) {
    EXPECT_GE(metric(m, name), 0) << name << "\n" << m;
  }
  for (const char* h : {"time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"}) {
    EXPECT_NE(m.find(std::string("# TYPE nanovllm:") + h + " histogram"), std::string::npos) << h;
    EXPECT_EQ(metric(m, std::string(h) + "_count"), h[0] == 'i' ? 6 : 2) << h << "\n" << m;
  }
  EXPECT_EQ(metric(m, "prompt_tokens_total"), 80);
  EXPECT_EQ(metric(m, "generation_tokens_total"), 8);
  EXPECT_EQ(metric(m, "prefix_cache_queries_total"), 80);
  EXPECT_EQ(metric(m, "prefix_cache_hits_total"), 32);
  EXPECT_EQ(metric(m, "request_success_total", "finished_reason=\"length\""), 2);
  EXPECT_EQ(metric(m, "kv_cache_usage_perc"), 0);

  // /tokenize and /detokenize round trip; the chat page.
  auto t = test::http_call(port, "POST", "/tokenize", R"({"prompt": "Hello world, héllo"})");
  ASSERT_EQ(t.status, 200) << t.body;
  auto tj = nlohmann::json::parse(t.body);
  EXPECT_EQ(tj["count"], tj["tokens"].size());
  auto d = test::http_call(port, "POST", "/detokenize", nlohmann::json{{"tokens", tj["tokens"]}}.dump());
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(nlohmann::json::parse(d.body)["prompt"], "Hello world, héllo");
  auto page = test::http_call(port, "GET", "/", "", {});
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.headers["Content-Type"].find("text/html"), std::string::npos);

  // A non-streaming client that goes away is aborted (its blocks freed) within a second.
  const double aborted_before = metric(metrics(port), "request_success_total", "finished_reason=\"abort\"");
  {
    namespace net = boost::asio;
    net::io_context ioc;
    net::ip::tcp::socket s(ioc);
    s.connect({net::ip::make_address("127.0.0.1"), uint16_t(port)});
    std::string body = R"({"prompt": [1, 2, 3], "max_tokens": 1000, "ignore_eos": true})";
    net::write(s, net::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    for (int i = 0; i < 500 && metric(metrics(port), "num_requests_running") < 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(metric(metrics(port), "num_requests_running"), 1);
  }  // closed
  double took = wait_idle(port, 1.0);
  EXPECT_GE(took, 0) << metrics(port);
  EXPECT_EQ(metric(metrics(port), "request_success_total", "finished_reason=\"abort\""), aborted_before + 1);
  EXPECT_EQ(test::http_call(port, "GET", "/health", "", {}).status, 200);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

TEST(ServerLifecycle, SigtermLetsRunningRequestsFinishThenExits0) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--kv-cache-memory", "16777216", "--shutdown-grace", "60"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  std::string reply;
  std::thread client([&] { reply = test::raw_call(port, streaming_request(60), false, 120); });
  for (int i = 0; i < 500 && metric(metrics(port), "generation_tokens_total") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server.stop(SIGTERM, 120), 0) << server.log();
  client.join();
  EXPECT_NE(reply.find("\"finish_reason\":\"length\""), std::string::npos) << reply.substr(0, 400);
  EXPECT_NE(reply.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(test::http_call(port, "GET", "/health", "", {}, 2).status, 0) << "no longer listening";
}

TEST(ServerLifecycle, SigtermAbortsWhatOutlivesTheGracePeriod) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--kv-cache-memory", "16777216", "--shutdown-grace", "0.3",
                                     "--max-model-len", "4096"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  std::string reply;
  std::thread client([&] { reply = test::raw_call(port, streaming_request(4000), false, 120); });
  for (int i = 0; i < 500 && metric(metrics(port), "generation_tokens_total") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(SIGTERM, 60), 0) << server.log();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  client.join();
  EXPECT_NE(reply.find("\"finish_reason\":\"abort\""), std::string::npos) << reply.substr(reply.size() > 600 ? reply.size() - 600 : 0);
  EXPECT_NE(reply.find("data: [DONE]"), std::string::npos);
}

TEST(ServerLifecycle, AModelThatFailsToLoadExits1) {
  auto [status, out] = test::run_command("timeout 60 " + test::binary_dir() +
                                         "/nanovllm serve --model /nonexistent/model --port 0");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("error"), std::string::npos) << out;
}

}  // namespace
}  // namespace nanovllm
