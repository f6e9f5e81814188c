// Hostile traffic against the real server on its default limits (4 MiB bodies): bodies up to the
// limit made of many keys, deep arrays, long strings, many values and many messages, sent by two
// clients at once while a third replays normal requests and a fourth polls /health. Every hostile
// request must be answered 4xx (each answer timed), /health must answer within 100 ms throughout,
// and the normal requests must give the same outputs as before the attack. Prints the figures.
// Runs alone (RUN_SERIAL): its latency bound is about the server, not about a busy machine.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <initializer_list>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/server_fixture.h"

namespace nanovllm {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Appends `"key":value` to s (with a comma unless first). Piece by piece: g++ 12 warns
// (-Wrestrict, falsely) on `"literal" + std::string` chains.
void add_member(std::string& s, bool first, const std::string& key, const char* value) {
  if (!first) s += ',';
  s += '"';
  s += key;
  s += "\":";
  s += value;
}

// The parts joined (as add_member, without `"literal" + std::string`).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s += p;
  return s;
}

struct Hostile {
  std::string name, target, body;
};

std::vector<Hostile> hostile_bodies() {
  const std::string C = "/v1/completions", H = "/v1/chat/completions";
  const size_t limit = 4 << 20;  // the server's default body limit
  std::vector<Hostile> out;
  // 1. An unknown field of ~300,000 keys (the quadratic case of nlohmann's ordered parse).
  std::string s = R"({"prompt": "hi", "max_tokens": 2, "junk": {)";
  for (int i = 0; s.size() < limit - 64; ++i) add_member(s, i == 0, std::to_string(i), "0");
  out.push_back({"300k keys in one object", C, s + "}}"});
  // 2. The same bytes as objects of 4,000 keys each: within every JSON limit, so the whole body
  //    is decoded; no prompt, so the answer is 400 after it.
  s = R"({"max_tokens": 2, "junk": [)";
  for (int o = 0; s.size() < limit - 80000; ++o) {
    s += o ? ",{" : "{";
    for (int k = 0; k < 4000; ++k) add_member(s, k == 0, std::to_string(k), "0");
    s += "}";
  }
  out.push_back({"4,000-key objects up to the limit, no prompt", C, s + "]}"});
  // 3. A logit_bias of 150,000 entries.
  s = R"({"prompt": "hi", "logit_bias": {)";
  for (int i = 0; i < 150000; ++i) add_member(s, i == 0, std::to_string(i), "1");
  out.push_back({"logit_bias of 150,000 entries", C, s + "}}"});
  // 4. Arrays nested 2,000,000 deep.
  out.push_back({"arrays 2,000,000 deep", C,
                 cat({R"({"prompt": )", std::string(2000000, '['), std::string(2000000, ']'), "}"})});
  // 5. A 4 MB string, and a 1 MiB one (within the string limit: tokenized, then over the context).
  out.push_back({"a 4 MB string", C, cat({R"({"prompt": ")", std::string(limit - 64, 'a'), "\"}"})});
  std::string words;
  while (words.size() < (1u << 20) - 16) words += "Hostile words. ";
  out.push_back({"a 1 MiB prompt", C, cat({R"({"prompt": ")", words, "\"}"})});
  // 6. 2,000,000 values in one array.
  s = R"({"prompt": [0)";
  while (s.size() < limit - 16) s += ",0";
  out.push_back({"2,000,000 token ids", C, s + "]}"});
  // 7. 80,000 chat messages (each within limits; the template renders them all).
  s = R"({"max_tokens": 2, "messages": [)";
  for (int i = 0; s.size() < limit - 128; ++i) {
    if (i) s += ',';
    s += R"({"role": "user", "content": "hello there"})";
  }
  out.push_back({"80,000 chat messages", H, s + "]}"});
  // 8. One tool whose parameters hold 60,000 properties (tojson of a large schema).
  s = R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {)";
  for (int i = 0; i < 60; ++i) {
    add_member(s, i == 0, cat({"p", std::to_string(i)}), R"({"type": "object", "properties": {)");
    for (int k = 0; k < 1000; ++k) add_member(s, k == 0, cat({"q", std::to_string(k)}), R"({"type": "string"})");
    s += "}}";
  }
  out.push_back({"a tool schema of 60,000 properties", H, s + "}}}}]}"});
  for (const Hostile& h : out) EXPECT_LE(h.body.size(), limit) << h.name;
  return out;
}

// Normal requests and their greedy outputs.
struct Normal {
  std::string target, body;
};

std::vector<Normal> normal_requests() {
  return {
      {"/v1/completions", R"({"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0})"},
      {"/v1/completions", R"({"prompt": [100, 200, 300, 400], "max_tokens": 12, "temperature": 0, "logprobs": 2})"},
      {"/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.8, "seed": 5})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 12, "temperature": 0})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 12, "temperature": 0,
          "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"zeta": {"type": "string"}, "alpha": {"type": "number"}}}}}]})"},
  };
}

// The part of a response that must not change: choices without ids or timings.
std::string outputs_of(const test::HttpResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  if (r.status != 200 || !j.is_object()) return cat({"status ", std::to_string(r.status), ": ", r.body.substr(0, 300)});
  return j["choices"].dump() + j["usage"].dump();
}

TEST(ServerHostileTraffic, HostileBodiesGet4xxWhileHealthAndNormalRequestsGoOn) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--max-model-len", "512", "--kv-cache-memory", "16777216"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  const std::vector<Normal> normal = normal_requests();
  std::vector<std::string> baseline;
  for (const Normal& n : normal) {
    test::HttpResult r = test::http_call(port, "POST", n.target, n.body);
    ASSERT_EQ(r.status, 200) << r.body;
    baseline.push_back(outputs_of(r));
  }
  const std::vector<Hostile> hostile = hostile_bodies();

  std::atomic<bool> attacking{true};
  // /health, every 10 ms on a fresh connection, for as long as the attack lasts.
  std::vector<double> health_ms;
  int health_bad = 0;
  std::thread health([&] {
    while (attacking) {
      auto t0 = Clock::now();
      int status = test::http_call(port, "GET", "/health", "", {}, 10).status;
      health_ms.push_back(ms_since(t0));
      if (status != 200) ++health_bad;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  // The normal requests, replayed in a loop.
  int normal_done = 0, normal_changed = 0;
  std::string first_change;
  std::thread normals([&] {
    while (attacking) {
      for (size_t i = 0; i < normal.size(); ++i) {
        std::string got = outputs_of(test::http_call(port, "POST", normal[i].target, normal[i].body));
        ++normal_done;
        if (got != baseline[i]) {
          if (normal_changed++ == 0) first_change = cat({"request ", std::to_string(i), ": ", got, "\nwas: ", baseline[i]});
        }
      }
    }
  });
  // Two attackers, each sending every hostile body twice.
  struct Answer {
    std::string name;
    int status;
    double ms;
    std::string body;
  };
  std::vector<Answer> answers[2];
  std::vector<std::thread> attackers;
  for (int a = 0; a < 2; ++a) {
    attackers.emplace_back([&, a] {
      for (int round = 0; round < 2; ++round) {
        for (size_t i = 0; i < hostile.size(); ++i) {
          const Hostile& h = hostile[(i + size_t(a) * 3) % hostile.size()];
          auto t0 = Clock::now();
          test::HttpResult r = test::http_call(port, "POST", h.target, h.body);
          answers[a].push_back({h.name, r.status, ms_since(t0), r.body.substr(0, 240)});
        }
      }
    });
  }
  for (auto& t : attackers) t.join();
  attacking = false;
  health.join();
  normals.join();

  std::map<std::string, double> slowest;
  double max_answer_ms = 0;
  for (const auto& list : answers) {
    for (const Answer& a : list) {
      SCOPED_TRACE(a.name);
      EXPECT_GE(a.status, 400) << a.body;
      EXPECT_LT(a.status, 500) << a.body;
      EXPECT_NE(a.body.find("\"error\""), std::string::npos) << a.body;
      slowest[a.name] = std::max(slowest[a.name], a.ms);
      max_answer_ms = std::max(max_answer_ms, a.ms);
    }
  }
  for (const auto& [name, ms] : slowest) std::printf("hostile: %-46s slowest answer %8.1f ms\n", name.c_str(), ms);
  std::sort(health_ms.begin(), health_ms.end());
  ASSERT_FALSE(health_ms.empty());
  const double p50 = health_ms[health_ms.size() / 2], p99 = health_ms[health_ms.size() * 99 / 100];
  std::printf("health: %zu probes during the attack, p50 %.2f ms, p99 %.2f ms, max %.2f ms; normal requests: %d\n",
              health_ms.size(), p50, p99, health_ms.back(), normal_done);
  RecordProperty("health_max_ms", std::to_string(health_ms.back()));
  RecordProperty("hostile_max_answer_ms", std::to_string(max_answer_ms));
  EXPECT_EQ(health_bad, 0);
  EXPECT_LT(health_ms.back(), 100.0) << "a /health probe waited over 100 ms during the attack";
  EXPECT_LT(max_answer_ms, 10000.0) << "a hostile request took over 10 s to be answered";
  EXPECT_GT(normal_done, 0);
  EXPECT_EQ(normal_changed, 0) << first_change;
  // Still serving the normal requests the same way.
  for (size_t i = 0; i < normal.size(); ++i) {
    EXPECT_EQ(outputs_of(test::http_call(port, "POST", normal[i].target, normal[i].body)), baseline[i]);
  }
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace nanovllm
