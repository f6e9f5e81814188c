#include "server/api_server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "engine/async_llm_engine.h"
#include "server/chat_page.h"
#include "server/metrics_text.h"
#include "server/serving_context.h"
#include "util/check.h"

namespace nanovllm::server {

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string path_of(const HttpRequest& req) {
  std::string_view t = req.target();
  return std::string(t.substr(0, t.find('?')));
}

// An overload answer: status 429 or 503 with Retry-After.
HttpResponse overloaded(int status, const std::string& message) {
  HttpResponse res = error_response(ApiError(status, status == 429 ? "rate_limit_error" : "service_unavailable",
                                             message, "", status == 429 ? "too_many_requests" : "overloaded"));
  res.set(http::field::retry_after, "1");
  return res;
}

class ApiServer {
 public:
  explicit ApiServer(const ServerOptions& o)
      : opts_(o),
        ioc_(1),
        acceptor_(ioc_),
        signals_(ioc_, SIGTERM, SIGINT),
        timer_(ioc_),
        accept_timer_(ioc_),
        workers_(size_t(std::max(1, o.request_threads))) {
    ctx_.ioc = &ioc_;
    ctx_.workers = &workers_;
    ctx_.limits = o.limits;
    ctx_.model_name = o.served_model_name.empty()
                          ? std::filesystem::path(o.engine.model).lexically_normal().filename().string()
                          : o.served_model_name;
    if (ctx_.model_name.empty()) ctx_.model_name = o.engine.model;
  }

  ~ApiServer() {
    if (loader_.joinable()) loader_.join();
    workers_.stop();  // queued work is dropped; what runs finishes before the engine goes
    workers_.join();
    if (async_) async_->shutdown();
  }

  int run() {
    // A socket per connection: allow as many as the hard limit does.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &files);
    }
    set_caps(files.rlim_cur);
    beast::error_code ec;
    auto address = net::ip::make_address(opts_.host, ec);
    if (ec) fail("--host '{}' is not an IP address", opts_.host);
    if (opts_.port < 0 || opts_.port > 65535) fail("--port must be in [0, 65535], got {}", opts_.port);
    tcp::endpoint endpoint(address, uint16_t(opts_.port));
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(endpoint, ec);
    if (ec) fail("cannot listen on {}:{}: {}", opts_.host, opts_.port, ec.message());
    acceptor_.listen(net::socket_base::max_listen_connections);
    std::printf("nanovllm: listening on http://%s:%d (model '%s' loading; at most %d connections, %d requests, "
                "%d request threads)\n", opts_.host.c_str(), int(acceptor_.local_endpoint().port()),
                ctx_.model_name.c_str(), max_connections_, max_requests_, std::max(1, opts_.request_threads));
    std::fflush(stdout);
    signals_.async_wait([this](beast::error_code e, int) {
      if (!e) begin_shutdown();
    });
    loader_ = std::thread([this] { load(); });
    accept();
    if (opts_.on_listening) opts_.on_listening(int(acceptor_.local_endpoint().port()));
    ioc_.run();
    return exit_code_;
  }

 private:
  void load() {
    try {
      if (opts_.before_load) opts_.before_load();
      auto engine = std::make_unique<LLMEngine>(opts_.engine);
      ModelView model;
      model.tokenizer = &engine->require_tokenizer();
      try {
        model.chat_template = &engine->chat_template();  // loaded now: later calls only read it
      } catch (const Error& e) {
        model.template_error = e.what();
        std::fprintf(stderr, "nanovllm: no chat template (%s); /v1/chat/completions will answer 400\n", e.what());
      }
      model.model_name = ctx_.model_name;
      model.max_model_len = engine->config().max_model_len;
      model.limits = opts_.limits;
      auto async = std::make_unique<AsyncLLMEngine>(*engine);
      net::post(ioc_, [this, engine = std::move(engine), async = std::move(async), model]() mutable {
        engine_ = std::move(engine);
        async_ = std::move(async);
        model_ = model;
        ctx_.engine = engine_.get();
        ctx_.async = async_.get();
        std::printf("nanovllm: model '%s' loaded; ready\n", ctx_.model_name.c_str());
        std::fflush(stdout);
        if (ctx_.shutting_down) async_->shutdown();
      });
    } catch (const std::exception& e) {
      std::string msg = e.what();
      net::post(ioc_, [this, msg] {
        std::fprintf(stderr, "error: %s\n", msg.c_str());
        exit_code_ = 1;
        ioc_.stop();
      });
    }
  }

  // The caps: given, or what fits the machine (open files, less 128 for the engine and the
  // connections being rejected; a quarter of memory for bodies).
  void set_caps(rlim_t open_files) {
    const rlim_t spare = 128 + kMaxRejecting;
    max_connections_ = opts_.max_connections > 0
                           ? opts_.max_connections
                           : int(std::clamp<rlim_t>(open_files > spare + 64 ? open_files - spare : 64, 64, 4096));
    max_requests_ = opts_.max_requests > 0 ? opts_.max_requests : 4096;
    uint64_t budget = opts_.max_body_bytes_in_flight;
    if (budget == 0) {
      const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
      budget = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 4 : uint64_t(1) << 30;
    }
    load_->max_body_bytes = std::max<uint64_t>(budget, opts_.session.max_body_bytes);
  }

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (ctx_.shutting_down || ec == net::error::operation_aborted) return;
        // e.g. too many open files: keep serving the others, and retry in a moment (not in a
        // loop that would keep the io thread busy until a descriptor frees up)
        accept_timer_.expires_after(std::chrono::milliseconds(50));
        accept_timer_.async_wait([this](beast::error_code e) {
          if (!e && !ctx_.shutting_down) accept();
        });
        return;
      }
      socket.set_option(tcp::no_delay(true), ec);
      const int open = load_->connections;
      if (open >= max_connections_ + kMaxRejecting) {  // rejecting takes a socket too: past this, drop
        socket.close(ec);
        accept();
        return;
      }
      auto session = std::make_shared<HttpSession>(
          std::move(socket), opts_.session, load_,
          [this](const std::shared_ptr<HttpSession>& s, HttpRequest&& req) { route(s, std::move(req)); },
          [](int status, const std::string& message) {
            if (status == 503) return overloaded(503, message);
            return error_response(ApiError(status, "invalid_request_error", message));
          });
      if (sessions_.size() > 64 && sessions_.size() > 2 * live_sessions_) prune_sessions();
      sessions_.push_back(session);
      ++live_sessions_;
      if (open >= max_connections_) {
        session->reject(overloaded(503, fmt::format("the server has {} connections open, its limit; retry later",
                                                    max_connections_)));
      } else {
        session->start();
      }
      accept();
    });
  }

  void prune_sessions() {
    std::erase_if(sessions_, [](const std::weak_ptr<HttpSession>& w) { return w.expired(); });
    live_sessions_ = sessions_.size();
  }

  void route(const std::shared_ptr<HttpSession>& s, HttpRequest&& req) {
    try {
      dispatch(s, std::move(req));
    } catch (const ApiError& e) {
      s->send(error_response(e));
    } catch (const Error& e) {
      s->send(error_response(ApiError(400, "invalid_request_error", e.what())));
    } catch (const std::exception& e) {
      s->send(error_response(ApiError(500, "internal_server_error", e.what())));
    }
  }

  // Runs on the io thread: routing, authentication and the caps only; everything that grows with
  // the body goes to a worker (offload).
  void dispatch(const std::shared_ptr<HttpSession>& s, HttpRequest&& req) {
    const std::string path = path_of(req);
    struct Route {
      const char* path;
      http::verb method;
    };
    static constexpr Route kRoutes[] = {
        {"/", http::verb::get},           {"/health", http::verb::get},
        {"/metrics", http::verb::get},    {"/v1/models", http::verb::get},
        {"/v1/completions", http::verb::post}, {"/v1/chat/completions", http::verb::post},
        {"/tokenize", http::verb::post},  {"/detokenize", http::verb::post},
    };
    const Route* route = nullptr;
    for (const Route& r : kRoutes) {
      if (path == r.path) route = &r;
    }
    if (!route) throw ApiError(404, "not_found_error", fmt::format("no route for {}", path), "", "not_found");
    const bool head = req.method() == http::verb::head && route->method == http::verb::get;
    if (req.method() != route->method && !head) {
      ApiError e(405, "invalid_request_error",
                 fmt::format("method {} is not allowed on {} (use {})", std::string(req.method_string()),
                             path, std::string(http::to_string(route->method))), "", "method_not_allowed");
      HttpResponse res = error_response(e);
      res.set(http::field::allow, http::to_string(route->method));
      s->send(std::move(res));
      return;
    }
    if (path.rfind("/v1/", 0) == 0 && !opts_.api_key.empty()) {
      auto it = req.find(http::field::authorization);
      if (it == req.end() || it->value() != "Bearer " + opts_.api_key) {
        throw ApiError(401, "authentication_error", "invalid or missing API key (Authorization: Bearer <key>)",
                       "", "invalid_api_key");
      }
    }
    if (route->method == http::verb::post) {
      auto ct = req.find(http::field::content_type);
      if (ct != req.end() && std::string_view(ct->value()).find("application/json") == std::string_view::npos) {
        throw ApiError(415, "invalid_request_error",
                       fmt::format("Content-Type must be application/json, got '{}'", std::string(ct->value())));
      }
    }
    if (path == "/") {
      HttpResponse res(http::status::ok, 11);
      res.set(http::field::content_type, "text/html; charset=utf-8");
      res.body() = std::string(chat_page_html());
      s->send(std::move(res));
      return;
    }
    if (path == "/metrics") {
      HttpResponse res(http::status::ok, 11);
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = async_ ? render_metrics(async_->metrics(), ctx_.model_name) : "";
      s->send(std::move(res));
      return;
    }
    if (!async_) {
      throw ApiError(503, "service_unavailable", "the model is still loading", "", "model_loading");
    }
    if (path == "/health") {
      if (ctx_.shutting_down) throw ApiError(503, "service_unavailable", "the server is shutting down");
      HttpResponse res(http::status::ok, 11);
      res.set(http::field::content_type, "application/json");
      res.body() = "{}";
      s->send(std::move(res));
      return;
    }
    if (path == "/v1/models") {
      Json model = {{"id", ctx_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "nanovllm"},
                    {"root", opts_.engine.model}, {"parent", nullptr},
                    {"max_model_len", engine_->config().max_model_len}};
      s->send(json_response(http::status::ok, Json{{"object", "list"}, {"data", Json::array({model})}}));
      return;
    }
    if (ctx_.shutting_down) throw ApiError(503, "service_unavailable", "the server is shutting down");
    if (load_->requests > max_requests_) {  // this request is counted
      s->send(overloaded(429, fmt::format("the server is answering {} requests, its limit; retry later", max_requests_)));
      return;
    }
    offload(s, std::move(req), path);
  }

  // Decodes a POST body on a worker thread, then answers (tokenize, detokenize) or starts the
  // generation back on the io thread.
  void offload(const std::shared_ptr<HttpSession>& s, HttpRequest&& req, const std::string& path) {
    auto answer = [this, s](HttpResponse res) {
      net::post(ioc_, [s, res = std::move(res)]() mutable { s->send(std::move(res)); });
    };
    net::post(workers_, [this, s, req = std::move(req), path, answer]() {
      try {
        if (path == "/tokenize") return answer(tokenize_response(req.body(), model_));
        if (path == "/detokenize") return answer(detokenize_response(req.body(), model_));
        DecodedRequest d = decode_generation_request(req.body(), path == "/v1/chat/completions", model_);
        net::post(ioc_, [this, s, d = std::move(d)]() mutable {
          if (s->disconnected()) return;
          if (ctx_.shutting_down) return s->send(error_response(ApiError(503, "service_unavailable", "the server is shutting down")));
          try {
            start_generation(ctx_, s, std::move(d));
          } catch (const ApiError& e) {
            s->send(error_response(e));
          } catch (const std::exception& e) {
            s->send(error_response(ApiError(500, "internal_server_error", e.what())));
          }
        });
      } catch (const ApiError& e) {
        answer(error_response(e));
      } catch (const Error& e) {
        answer(error_response(ApiError(400, "invalid_request_error", e.what())));
      } catch (const std::exception& e) {
        answer(error_response(ApiError(500, "internal_server_error", e.what())));
      }
    });
  }

  void begin_shutdown() {
    if (ctx_.shutting_down) return;
    ctx_.shutting_down = true;
    std::printf("nanovllm: shutting down (grace %.1f s)\n", opts_.shutdown_grace_s);
    std::fflush(stdout);
    beast::error_code ec;
    acceptor_.close(ec);
    accept_timer_.cancel();
    for (auto& w : sessions_) {
      if (auto s = w.lock()) s->close_when_idle();
    }
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(opts_.shutdown_grace_s));
    poll_shutdown();
  }

  void poll_shutdown() {
    bool busy = ctx_.num_jobs > 0;
    for (auto& w : sessions_) {
      if (auto s = w.lock(); s && s->busy()) busy = true;
    }
    if (!busy && loader_done()) {
      if (async_) async_->shutdown();
      ioc_.stop();
      return;
    }
    if (Clock::now() >= deadline_ && async_ && !aborted_) {
      aborted_ = true;  // the grace period is over: abort what runs (each gets its final event)
      async_->shutdown();
      hard_deadline_ = Clock::now() + std::chrono::seconds(5);
    }
    if (aborted_ && Clock::now() >= hard_deadline_) {  // a client that never reads: give up
      ioc_.stop();
      return;
    }
    timer_.expires_after(std::chrono::milliseconds(20));
    timer_.async_wait([this](beast::error_code ec) {
      if (!ec) poll_shutdown();
    });
  }

  bool loader_done() const { return async_ != nullptr || exit_code_ != 0; }

  static constexpr int kMaxRejecting = 256;  // connections past the cap answered 503; more are dropped

  ServerOptions opts_;
  std::shared_ptr<ConnectionLoad> load_ = std::make_shared<ConnectionLoad>();
  int max_connections_ = 0, max_requests_ = 0;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  net::signal_set signals_;
  net::steady_timer timer_, accept_timer_;
  ServingContext ctx_;
  net::thread_pool workers_;
  ModelView model_;  // set once the model is loaded (before any request reaches a worker)
  std::unique_ptr<LLMEngine> engine_;
  std::unique_ptr<AsyncLLMEngine> async_;
  std::thread loader_;
  std::vector<std::weak_ptr<HttpSession>> sessions_;
  size_t live_sessions_ = 0;
  Clock::time_point deadline_, hard_deadline_;
  bool aborted_ = false;
  int exit_code_ = 0;
};

}  // namespace

int run_server(const ServerOptions& options) {
  ApiServer server(options);
  return server.run();
}

}  // namespace nanovllm::server
