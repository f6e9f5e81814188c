#include "server/bench_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "util/check.h"

namespace nanovllm::server {

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Splits a server-sent event stream into the payloads of its "data:" lines, one per event.
class SseReader {
 public:
  // Appends bytes; returns the data of every event completed by them.
  std::vector<std::string> feed(const char* data, size_t size) {
    buffer_.append(data, size);
    std::vector<std::string> events;
    size_t end;
    while ((end = next_event_end()) != std::string::npos) {
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + separator_);
      std::string payload;
      size_t pos = 0;
      while (pos <= event.size()) {
        size_t nl = event.find('\n', pos);
        if (nl == std::string::npos) nl = event.size();
        std::string_view line(event.data() + pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.starts_with("data:")) {
          line.remove_prefix(5);
          if (line.starts_with(' ')) line.remove_prefix(1);
          if (!payload.empty()) payload += '\n';
          payload += line;
        }
        pos = nl + 1;
      }
      if (!payload.empty()) events.push_back(std::move(payload));
    }
    return events;
  }

 private:
  // An event ends at a blank line: "\n\n" or "\r\n\r\n".
  size_t next_event_end() {
    size_t a = buffer_.find("\n\n"), b = buffer_.find("\r\n\r\n");
    if (b != std::string::npos && (a == std::string::npos || b < a)) {
      separator_ = 4;
      return b;
    }
    separator_ = 2;
    return a;
  }

  std::string buffer_;
  size_t separator_ = 2;
};

http::request<http::string_body> make_request(http::verb verb, const std::string& target,
                                              const BenchClientOptions& o, std::string body) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, o.host + ":" + std::to_string(o.port));
  req.set(http::field::user_agent, "nanovllm-bench-serve");
  if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.keep_alive(false);
  req.prepare_payload();
  return req;
}

// The server's message from an OpenAI error object, else the body itself (shortened).
std::string error_message(unsigned status, const std::string& body) {
  std::string what = body.substr(0, 300);
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
    what = j["error"]["message"].get<std::string>();
  return "HTTP " + std::to_string(status) + ": " + what;
}

// Applies one streamed event to the result; returns false at "[DONE]".
bool apply_event(const std::string& data, Clock::time_point sent, Clock::time_point now,
                 Clock::time_point& last_chunk, RequestResult& r) {
  if (data == "[DONE]") return false;
  nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded()) fail("the server streamed an event that is not JSON: {}", data.substr(0, 200));
  if (j.contains("error")) fail("the server streamed an error: {}", j["error"].dump());
  if (j.contains("usage") && j["usage"].is_object()) {
    r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
    r.output_tokens = j["usage"].value("completion_tokens", 0);
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    if (r.num_chunks == 0) r.ttft = seconds_between(sent, now);
    else r.itl.push_back(seconds_between(last_chunk, now));
    last_chunk = now;
    ++r.num_chunks;
  }
  return true;
}

struct Dispatch {
  int in_flight = 0;
  int remaining = 0;
  asio::steady_timer* slot_freed = nullptr;  // cancelled whenever a request ends
};

asio::awaitable<void> send_one(const BenchRequest& request, const BenchClientOptions& o,
                               const std::string& model, RequestResult& r, Dispatch& d) {
  const Clock::time_point sent = Clock::now();
  Clock::time_point last_chunk = sent;
  try {
    auto ex = co_await asio::this_coro::executor;
    tcp::resolver resolver(ex);
    tcp::socket socket(ex);
    auto endpoints = co_await resolver.async_resolve(o.host, std::to_string(o.port), asio::use_awaitable);
    co_await asio::async_connect(socket, endpoints, asio::use_awaitable);

    nlohmann::json body = {{"model", model},           {"prompt", request.prompt},
                           {"max_tokens", request.max_tokens}, {"temperature", o.temperature},
                           {"ignore_eos", true},        {"stream", true},
                           {"stream_options", {{"include_usage", true}}}};
    auto req = make_request(http::verb::post, "/v1/completions", o, body.dump());
    co_await http::async_write(socket, req, asio::use_awaitable);

    boost::beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    co_await http::async_read_header(socket, buffer, parser, asio::use_awaitable);
    const unsigned status = parser.get().result_int();

    SseReader sse;
    std::string error_body;
    bool done = false;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      boost::system::error_code ec;
      co_await http::async_read_some(socket, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) throw boost::system::system_error(ec);
      const size_t n = sizeof(chunk) - parser.get().body().size;
      if (status != 200) {
        error_body.append(chunk, n);
        continue;
      }
      const Clock::time_point now = Clock::now();
      for (const std::string& data : sse.feed(chunk, n))
        if (!done && !apply_event(data, sent, now, last_chunk, r)) done = true;
    }
    if (status != 200) fail("{}", error_message(status, error_body));
    if (!done) fail("the stream ended without \"data: [DONE]\"");
    r.latency = seconds_between(sent, Clock::now());
    if (r.output_tokens == 0) r.output_tokens = r.num_chunks;
    r.success = true;
  } catch (const std::exception& e) {
    r.success = false;
    r.error = e.what();
    r.latency = seconds_between(sent, Clock::now());
  }
  --d.in_flight;
  --d.remaining;
  d.slot_freed->cancel();
}

asio::awaitable<void> dispatch_all(const std::vector<BenchRequest>& requests, const BenchClientOptions& o,
                                   const std::string& model, BenchRun& run) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer slot_freed(ex);
  asio::steady_timer arrival(ex);
  Dispatch d;
  d.remaining = int(requests.size());
  d.slot_freed = &slot_freed;
  std::mt19937_64 rng(o.seed);
  const bool poisson = std::isfinite(o.request_rate) && o.request_rate > 0;
  std::exponential_distribution<double> gap(poisson ? o.request_rate : 1.0);
  const Clock::time_point start = Clock::now();
  Clock::time_point next = start;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (poisson && i > 0) {
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      arrival.expires_at(next);
      co_await arrival.async_wait(asio::use_awaitable);
    }
    while (o.max_concurrency > 0 && d.in_flight >= o.max_concurrency) {
      boost::system::error_code ec;  // operation_aborted: a request ended
      slot_freed.expires_at(Clock::time_point::max());
      co_await slot_freed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    ++d.in_flight;
    asio::co_spawn(ex, send_one(requests[i], o, model, run.requests[i], d), asio::detached);
  }
  while (d.remaining > 0) {
    boost::system::error_code ec;
    slot_freed.expires_at(Clock::time_point::max());
    co_await slot_freed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  run.duration = seconds_between(start, Clock::now());
}

asio::awaitable<void> get_models(const BenchClientOptions& o, std::string& id) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  tcp::socket socket(ex);
  auto endpoints = co_await resolver.async_resolve(o.host, std::to_string(o.port), asio::use_awaitable);
  co_await asio::async_connect(socket, endpoints, asio::use_awaitable);
  auto req = make_request(http::verb::get, "/v1/models", o, "");
  co_await http::async_write(socket, req, asio::use_awaitable);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  co_await http::async_read(socket, buffer, res, asio::use_awaitable);
  if (res.result_int() != 200) fail("GET /v1/models: {}", error_message(res.result_int(), res.body()));
  nlohmann::json j = nlohmann::json::parse(res.body(), nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id"))
    fail("GET /v1/models: no model in {}", res.body().substr(0, 300));
  id = j["data"][0]["id"].get<std::string>();
}

// Runs `coro` to its end on a fresh io_context; rethrows what it threw.
void run_to_end(asio::awaitable<void> coro) {
  asio::io_context io;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(coro), [&](std::exception_ptr e) { error = e; });
  io.run();
  if (error) std::rethrow_exception(error);
}

double interpolated_percentile(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - double(lo));
}

}  // namespace

std::string first_served_model(const BenchClientOptions& options) {
  std::string id;
  try {
    run_to_end(get_models(options, id));
  } catch (const boost::system::system_error& e) {
    fail("cannot reach the server at {}:{}: {}", options.host, options.port, e.code().message());
  }
  return id;
}

BenchRun run_bench(const std::vector<BenchRequest>& requests, const BenchClientOptions& options) {
  if (options.max_concurrency < 0) fail("--max-concurrency must be >= 0, got {}", options.max_concurrency);
  if (!(options.request_rate > 0)) fail("--request-rate must be > 0 (inf: all at once), got {}", options.request_rate);
  BenchRun run;
  run.model = options.model.empty() ? first_served_model(options) : options.model;
  run.requests.resize(requests.size());
  run_to_end(dispatch_all(requests, options, run.model, run));
  return run;
}

Distribution distribution(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
  d.median = interpolated_percentile(values, 50);
  d.p99 = interpolated_percentile(values, 99);
  return d;
}

BenchSummary summarize(const BenchRun& run) {
  BenchSummary s;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestResult& r : run.requests) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft);
    e2el.push_back(r.latency);
    if (r.output_tokens > 1) tpot.push_back((r.latency - r.ttft) / double(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  s.duration = run.duration;
  if (run.duration > 0) {
    s.request_throughput = s.completed / run.duration;
    s.output_throughput = double(s.output_tokens) / run.duration;
    s.total_throughput = double(s.prompt_tokens + s.output_tokens) / run.duration;
  }
  s.ttft = distribution(std::move(ttft));
  s.tpot = distribution(std::move(tpot));
  s.itl = distribution(std::move(itl));
  s.e2el = distribution(std::move(e2el));
  return s;
}

}  // namespace nanovllm::server
