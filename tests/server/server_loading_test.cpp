// The server listens before the model is loaded: while a test hook holds the load back, /health
// answers 503 and the API an OpenAI error 503 (model_loading); once released, /health turns 200
// and requests are served. In-process (run_server on a thread), so the hold is a latch, not a
// race against a sleep.
#include <signal.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include <nlohmann/json.hpp>

#include "server/api_server.h"
#include "server/server_fixture.h"

namespace nanovllm {
namespace {

using Json = nlohmann::json;

TEST(ServerLoading, AnswersWhileTheModelLoads) {
  const std::string model = test::tiny_text_model();
  std::mutex mu;
  std::condition_variable cv;
  bool loading = false, release = false;
  std::promise<int> port_promise;
  server::ServerOptions o;
  o.engine = test::tiny_config(model);
  o.engine.kv_cache_memory = 8 << 20;
  o.port = 0;
  o.on_listening = [&](int port) { port_promise.set_value(port); };
  o.before_load = [&] {
    std::unique_lock lock(mu);
    loading = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  std::future<int> exit_code = std::async(std::launch::async, [&] { return server::run_server(o); });
  std::future<int> port_future = port_promise.get_future();
  ASSERT_EQ(port_future.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const int port = port_future.get();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return loading; }));
  }
  // Held in before_load: the model is not loaded, whatever the timing.
  auto health = test::http_call(port, "GET", "/health", "", {});
  EXPECT_EQ(health.status, 503) << health.body;
  for (auto [method, path] : {std::pair{"GET", "/v1/models"}, {"POST", "/v1/completions"},
                              {"POST", "/v1/chat/completions"}, {"POST", "/tokenize"}}) {
    auto r = test::http_call(port, method, path, R"({"prompt": "hi", "max_tokens": 2})");
    EXPECT_EQ(r.status, 503) << path << " " << r.body;
    Json j = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["code"], "model_loading") << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("loading"), std::string::npos);
  }
  EXPECT_EQ(test::http_call(port, "GET", "/", "", {}).status, 200) << "the chat page needs no model";
  EXPECT_EQ(test::http_call(port, "GET", "/health", "", {}).status, 503) << "still held";
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  int status = 0;
  for (int i = 0; i < 6000 && status != 200; ++i) {
    status = test::http_call(port, "GET", "/health", "", {}).status;
    if (status == 503) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, 200) << "ready once the load finished";
  auto r = test::http_call(port, "POST", "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 3, "ignore_eos": true})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["usage"]["completion_tokens"], 3);
  ::kill(::getpid(), SIGTERM);  // the server's signal_set handles it: a clean shutdown
  ASSERT_EQ(exit_code.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(exit_code.get(), 0);
}

}  // namespace
}  // namespace nanovllm
