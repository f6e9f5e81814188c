#include "server/metrics_text.h"

#include <fmt/format.h>

namespace nanovllm::server {

namespace {

std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP nanovllm:{} {}\n# TYPE nanovllm:{} {}\n", name, help, name, type);
}

void sample(std::string& out, const char* name, const std::string& labels, double v) {
  out += fmt::format("nanovllm:{}{{{}}} {}\n", name, labels, v);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h,
               const std::string& labels) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += fmt::format("nanovllm:{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, h.bounds[i], cumulative);
  }
  cumulative += h.counts.back();
  out += fmt::format("nanovllm:{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cumulative);
  out += fmt::format("nanovllm:{}_sum{{{}}} {}\n", name, labels, h.sum);
  out += fmt::format("nanovllm:{}_count{{{}}} {}\n", name, labels, h.count);
}

}  // namespace

std::string render_metrics(const EngineMetrics& m, const std::string& model_name) {
  const std::string labels = "model_name=\"" + label_value(model_name) + "\"";
  std::string out;
  header(out, "num_requests_running", "gauge", "Number of requests in model execution batches.");
  sample(out, "num_requests_running", labels, m.num_requests_running);
  header(out, "num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  sample(out, "num_requests_waiting", labels, m.num_requests_waiting);
  header(out, "kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  sample(out, "kv_cache_usage_perc", labels, m.kv_cache_usage_perc);
  header(out, "kv_cache_total_blocks", "gauge", "KV-cache blocks in all.");
  sample(out, "kv_cache_total_blocks", labels, m.num_kv_blocks);
  header(out, "kv_cache_free_blocks", "gauge", "KV-cache blocks free (cached prefixes included).");
  sample(out, "kv_cache_free_blocks", labels, m.num_free_kv_blocks);
  header(out, "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
  sample(out, "prefix_cache_queries_total", labels, double(m.prefix_cache_queries));
  header(out, "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  sample(out, "prefix_cache_hits_total", labels, double(m.prefix_cache_hits));
  header(out, "num_preemptions_total", "counter", "Cumulative number of preemptions.");
  sample(out, "num_preemptions_total", labels, double(m.num_preemptions));
  header(out, "prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  sample(out, "prompt_tokens_total", labels, double(m.prompt_tokens_total));
  header(out, "generation_tokens_total", "counter", "Number of generation tokens processed.");
  sample(out, "generation_tokens_total", labels, double(m.generation_tokens_total));
  header(out, "request_success_total", "counter",
         "Count of finished requests by finish reason (each of a request's n samples counts).");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = m.request_success_total.find(reason);
    sample(out, "request_success_total", labels + ",finished_reason=\"" + reason + "\"",
           double(it == m.request_success_total.end() ? 0 : it->second));
  }
  histogram(out, "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            m.time_to_first_token_seconds, labels);
  histogram(out, "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            m.inter_token_latency_seconds, labels);
  histogram(out, "e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
            m.e2e_request_latency_seconds, labels);
  return out;
}

}  // namespace nanovllm::server
