#pragma once
// The load generator of `nanovllm bench-serve` (vLLM's benchmark_serving as the model): sends
// token-id prompts to POST /v1/completions with stream: true over HTTP/1.1 (Boost.Beast), at a
// Poisson request rate and/or under a concurrency cap, and times every streamed chunk.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace nanovllm::server {

struct BenchRequest {
  std::vector<int32_t> prompt;  // token ids, sent as "prompt": [ids]
  int max_tokens = 0;           // sent with "ignore_eos": true, so the output has exactly this many
};

struct BenchClientOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model;    // the "model" field; empty: the first id of GET /v1/models
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at once
  int max_concurrency = 0;  // requests in flight at most; 0: no cap
  float temperature = 0.6f;  // as `nanovllm bench` (nano-vllm's bench.py)
  uint64_t seed = 0;         // of the Poisson arrival times
};

// One request as the client saw it. Times in seconds from when the request was sent.
struct RequestResult {
  bool success = false;
  std::string error;         // why it failed: HTTP status and the server's message, or socket error
  int prompt_tokens = 0;     // usage.prompt_tokens (0 when the server sent no usage)
  int output_tokens = 0;     // usage.completion_tokens, else the number of token chunks
  int num_chunks = 0;        // streamed chunks that carried a choice
  double ttft = 0;           // first chunk with a choice
  double latency = 0;        // "data: [DONE]" (end of the response)
  std::vector<double> itl;   // [num_chunks - 1] gaps between successive chunks
};

struct BenchRun {
  std::string model;                     // the model name the requests named
  double duration = 0;                   // s, first request sent to last response ended
  std::vector<RequestResult> requests;   // in the order of the workload
};

// GET /v1/models and returns the first model id. Throws Error when the server cannot be reached
// or answers with an error.
std::string first_served_model(const BenchClientOptions& options);

// Sends all requests (arrival times drawn from Exp(request_rate), capped by max_concurrency) and
// waits for every response. A request that fails is recorded, never thrown.
BenchRun run_bench(const std::vector<BenchRequest>& requests, const BenchClientOptions& options);

// Mean, median and p99 (linear interpolation, as numpy.percentile) of a sample; zeros if empty.
struct Distribution {
  double mean = 0, median = 0, p99 = 0;
};
Distribution distribution(std::vector<double> values);

// vLLM's benchmark_serving metrics over the successful requests.
struct BenchSummary {
  int completed = 0, failed = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double duration = 0;             // s
  double request_throughput = 0;   // completed / duration
  double output_throughput = 0;    // output_tokens / duration
  double total_throughput = 0;     // (prompt + output tokens) / duration
  Distribution ttft, tpot, itl, e2el;  // s; tpot = (latency - ttft) / (output_tokens - 1)
};
BenchSummary summarize(const BenchRun& run);

}  // namespace nanovllm::server
