// `nanovllm bench-serve` against `nanovllm serve` on the tiny model: every request of the bench
// workload completes with exactly its max_tokens (ignore_eos), the counts match the workload and
// the server's own counters; the percentile math; a clear error without a server.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "server/bench_client.h"
#include "server/server_fixture.h"
#include "util/bench_workload.h"

namespace nanovllm::test {
namespace {

// The JSON line bench-serve prints on stdout (the output mixes it with the table on stderr).
nlohmann::json json_line(const std::string& output) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("{\"", 0) == 0) return nlohmann::json::parse(line);
  ADD_FAILURE() << "no JSON line in:\n" << output;
  return {};
}

// The value of the Prometheus sample `name` (labels ignored), or -1 when absent.
double metric_value(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name, 0) == 0 && line.size() > name.size() && (line[name.size()] == ' ' || line[name.size()] == '{'))
      return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

std::string cli() { return (fs::absolute(binary_dir()) / "nanovllm").string(); }

TEST(BenchServe, Distribution) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  server::Distribution d = server::distribution(v);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_DOUBLE_EQ(d.median, 50.5);
  EXPECT_NEAR(d.p99, 99.01, 1e-9);  // numpy.percentile(range(1, 101), 99)
  d = server::distribution({});
  EXPECT_EQ(d.mean, 0);
  d = server::distribution({3.0});
  EXPECT_EQ(d.p99, 3.0);
}

TEST(BenchServe, CountsMatchTheWorkload) {
  const std::string model = tiny_text_model();
  ASSERT_FALSE(model.empty());
  ServerProcess server(model, {});
  ASSERT_TRUE(server.ready()) << server.log();
  const int num_seqs = 12, max_input = 48, max_output = 24, min_len = 4;
  BenchWorkload w = make_bench_workload(num_seqs, max_input, max_output, min_len, 3);
  int64_t prompt_tokens = 0, output_tokens = 0;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    prompt_tokens += int64_t(w.prompts[i].size());
    output_tokens += w.max_tokens[i];
  }
  const std::string common = fmt::format(
      "{} bench-serve --port {} --num-seqs {} --max-input-len {} --max-output-len {} --min-len {} --seed 3",
      cli(), server.port(), num_seqs, max_input, max_output, min_len);
  // Capped concurrency, then Poisson arrivals with no cap.
  for (const char* load : {" --max-concurrency 4", " --request-rate 40"}) {
    auto [code, out] = run_command(common + load);
    ASSERT_EQ(code, 0) << out;
    nlohmann::json j = json_line(out);
    EXPECT_EQ(j["completed"], num_seqs) << out;
    EXPECT_EQ(j["failed"], 0);
    EXPECT_EQ(j["prompt_tokens"], prompt_tokens);  // from the server's usage
    EXPECT_EQ(j["output_tokens"], output_tokens);  // exactly max_tokens each
    EXPECT_EQ(j["expected_output_tokens"], output_tokens);
    EXPECT_GT(j["output_tok_per_s"].get<double>(), 0);
    EXPECT_GT(j["request_throughput"].get<double>(), 0);
    for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"}) {
      EXPECT_GT(j[k]["mean"].get<double>(), 0) << k;
      EXPECT_LE(j[k]["median"].get<double>(), j[k]["p99"].get<double>()) << k;
    }
    EXPECT_LE(j["ttft_ms"]["p99"].get<double>(), j["e2el_ms"]["p99"].get<double>());
    EXPECT_NE(out.find("output throughput (tok/s)"), std::string::npos) << out;
  }
  // The server counted the same: nothing left running, and both runs' tokens (each after a
  // 16-token warm-up request) in its generation counter.
  HttpResult m = http_call(server.port(), "GET", "/metrics", "", {});
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(metric_value(m.body, "nanovllm:num_requests_running"), 0) << m.body;
  EXPECT_EQ(metric_value(m.body, "nanovllm:generation_tokens_total"), double(2 * (output_tokens + 16))) << m.body;
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(BenchServe, NoServerIsAClearError) {
  int port = 0;
  {
    boost::asio::io_context io;  // a port that was free a moment ago
    boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  auto [code, out] = run_command(fmt::format("{} bench-serve --port {} --num-seqs 2", cli(), port));
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("cannot reach the server"), std::string::npos) << out;
}

}  // namespace
}  // namespace nanovllm::test
