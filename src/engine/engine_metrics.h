#pragma once
// Counters and latency histograms of an AsyncLLMEngine (vLLM's metric set), updated on the engine
// thread and read as one snapshot by any thread.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nanovllm {

// A Prometheus-style histogram: cumulative counts per upper bound, plus sum and count.
struct Histogram {
  std::vector<double> bounds;   // upper bounds, increasing (+Inf implied)
  std::vector<uint64_t> counts;  // [bounds.size() + 1] observations per bucket (not cumulative)
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++count;
  }
};

struct EngineMetrics {
  // Gauges, as of the last step.
  int num_requests_running = 0;
  int num_requests_waiting = 0;  // in the scheduler's waiting queue or not yet handed to it
  int num_kv_blocks = 0;
  int num_free_kv_blocks = 0;
  double kv_cache_usage_perc = 0;  // 0..1, share of KV blocks in use
  // Counters.
  int64_t num_preemptions = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up
  int64_t prefix_cache_hits = 0;     // of which found in the cache
  int64_t num_steps = 0;
  int64_t num_step_errors = 0;
  std::map<std::string, int64_t> request_success_total;  // by finished_reason
  // Latencies in seconds.
  Histogram time_to_first_token_seconds{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram inter_token_latency_seconds{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e_request_latency_seconds{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0}};
};

}  // namespace nanovllm
