// nanovllm bench-serve: nano-vllm's bench.py workload sent to a running `nanovllm serve` over
// HTTP with streaming (vLLM's benchmark_serving as the model). Prints request throughput,
// output tok/s and TTFT / TPOT / ITL / end-to-end latency (mean, median, p99) as a table on
// stderr and one JSON line on stdout.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/bench_client.h"
#include "tools/commands.h"
#include "util/bench_workload.h"
#include "util/check.h"

namespace nanovllm::cli {

namespace {

void print_table(const server::BenchSummary& s, int64_t expected_output_tokens, const std::string& model,
                 const server::BenchClientOptions& o) {
  auto row = [](const char* name, const std::string& value) {
    std::fprintf(stderr, "%-36s %s\n", name, value.c_str());
  };
  auto num = [](double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); };
  auto ms = [&](const char* name, const server::Distribution& d) {
    std::fprintf(stderr, "%-16s %10.2f %10.2f %10.2f\n", name, d.mean * 1e3, d.median * 1e3, d.p99 * 1e3);
  };
  std::fprintf(stderr, "==================== bench-serve ====================\n");
  row("model", model);
  row("request rate (req/s)", std::isfinite(o.request_rate) ? num(o.request_rate, 2) : "inf");
  row("max concurrency", o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "none");
  row("successful requests", std::to_string(s.completed));
  row("failed requests", std::to_string(s.failed));
  row("duration (s)", num(s.duration, 2));
  row("prompt tokens", std::to_string(s.prompt_tokens));
  row("output tokens (expected)", fmt::format("{} ({})", s.output_tokens, expected_output_tokens));
  row("request throughput (req/s)", num(s.request_throughput, 2));
  row("output throughput (tok/s)", num(s.output_throughput, 1));
  row("total throughput (tok/s)", num(s.total_throughput, 1));
  std::fprintf(stderr, "%-16s %10s %10s %10s\n", "latency (ms)", "mean", "median", "p99");
  ms("TTFT", s.ttft);
  ms("TPOT", s.tpot);
  ms("ITL", s.itl);
  ms("end-to-end", s.e2el);
  std::fprintf(stderr, "=====================================================\n");
}

nlohmann::json distribution_json(const server::Distribution& d) {
  return {{"mean", d.mean * 1e3}, {"median", d.median * 1e3}, {"p99", d.p99 * 1e3}};
}

}  // namespace

void add_bench_serve(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("bench-serve", "load a running `nanovllm serve` with the bench workload");
  struct Args {
    server::BenchClientOptions client;
    int num_seqs = 256, max_input_len = 1024, max_output_len = 1024, min_len = 100;
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--host", a->client.host, "server address");
  cmd->add_option("--port", a->client.port, "server port");
  cmd->add_option("--model", a->client.model, "model name to request (default: the first of /v1/models)");
  cmd->add_option("--api-key", a->client.api_key, "sent as a bearer token");
  cmd->add_option("--request-rate", a->client.request_rate,
                  "requests per second, Poisson arrivals (default inf: all at once)");
  cmd->add_option("--max-concurrency", a->client.max_concurrency, "requests in flight at most (0: no cap)");
  cmd->add_option("--temperature", a->client.temperature, "sampling temperature of every request");
  cmd->add_option("--num-seqs", a->num_seqs, "requests (bench.py workload)");
  cmd->add_option("--max-input-len", a->max_input_len);
  cmd->add_option("--max-output-len", a->max_output_len);
  cmd->add_option("--min-len", a->min_len);
  cmd->add_option("--seed", a->seed, "seed of the workload and of the arrival times");
  on_run(cmd, commands, [a] {
    BenchWorkload w = make_bench_workload(a->num_seqs, a->max_input_len, a->max_output_len, a->min_len,
                                          a->seed);
    std::vector<server::BenchRequest> requests(w.prompts.size());
    int64_t expected_output_tokens = 0, expected_prompt_tokens = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].prompt = std::move(w.prompts[i]);
      requests[i].max_tokens = w.max_tokens[i];
      expected_prompt_tokens += int64_t(requests[i].prompt.size());
      expected_output_tokens += w.max_tokens[i];
    }
    server::BenchClientOptions client = a->client;
    client.seed = a->seed;
    if (client.model.empty()) client.model = server::first_served_model(client);

    // Warm-up, as bench.py and benchmark_serving do: one short request, not timed.
    if (!requests.empty()) {
      server::BenchRequest warm{requests[0].prompt, 16};
      server::BenchRun w_run = server::run_bench({warm}, client);
      if (!w_run.requests[0].success) fail("the warm-up request failed: {}", w_run.requests[0].error);
    }

    server::BenchRun run = server::run_bench(requests, client);
    server::BenchSummary s = server::summarize(run);
    print_table(s, expected_output_tokens, run.model, client);

    nlohmann::json j;
    j["num_seqs"] = a->num_seqs;
    j["completed"] = s.completed;
    j["failed"] = s.failed;
    j["prompt_tokens"] = s.prompt_tokens;
    j["output_tokens"] = s.output_tokens;
    j["expected_prompt_tokens"] = expected_prompt_tokens;
    j["expected_output_tokens"] = expected_output_tokens;
    j["seconds"] = s.duration;
    j["request_rate"] = std::isfinite(client.request_rate) ? nlohmann::json(client.request_rate)
                                                            : nlohmann::json("inf");
    j["max_concurrency"] = client.max_concurrency;
    j["request_throughput"] = s.request_throughput;
    j["output_tok_per_s"] = s.output_throughput;
    j["total_tok_per_s"] = s.total_throughput;
    j["ttft_ms"] = distribution_json(s.ttft);
    j["tpot_ms"] = distribution_json(s.tpot);
    j["itl_ms"] = distribution_json(s.itl);
    j["e2el_ms"] = distribution_json(s.e2el);
    std::printf("%s\n", j.dump().c_str());

    for (const server::RequestResult& r : run.requests) {
      if (!r.success) {
        std::fprintf(stderr, "error: %d of %zu requests failed; the first: %s\n", s.failed,
                     run.requests.size(), r.error.c_str());
        return 1;
      }
    }
    return 0;
  });
}

}  // namespace nanovllm::cli
