// `nanovllm serve`: the OpenAI-compatible server (src/server/api_server.h).
#include "server/api_server.h"
#include "tools/commands.h"

namespace nanovllm::cli {

void add_serve(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("serve", "serve the OpenAI API (completions, chat) over HTTP");
  auto o = std::make_shared<server::ServerOptions>();
  o->engine.show_progress = false;
  add_engine_flags(*cmd, o->engine);
  cmd->add_option("--host", o->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "port (default 8000; 0: any free port, printed)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--served-model-name", o->served_model_name, "model name in the API (default: the folder's name)");
  cmd->add_option("--max-body-bytes", o->session.max_body_bytes, "largest request body (default 4 MiB)")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 32));
  cmd->add_option("--shutdown-grace", o->shutdown_grace_s,
                  "seconds running requests may finish after SIGTERM before they are aborted (default 10)")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-n", o->limits.max_n, "largest n (samples per request)")->check(CLI::Range(1, 1024));
  cmd->add_option("--max-connections", o->max_connections,
                  "open connections at most; more get 503 + Retry-After (default: what the open-file limit allows, "
                  "at most 4096)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-requests", o->max_requests,
                  "requests being decoded, queued or generated at most; more get 429 + Retry-After (default 4096)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-body-bytes-in-flight", o->max_body_bytes_in_flight,
                  "request bodies being received at once, in bytes; more get 503 + Retry-After (0: a quarter of memory)");
  cmd->add_option("--request-threads", o->request_threads,
                  "threads that decode requests (JSON, chat template, tokenizer) and encode large responses (default 2)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--keep-alive-timeout", o->session.keep_alive_timeout_s,
                  "seconds an idle connection may wait for its next request (default 30)")->check(CLI::Range(1, 86400));
  cmd->add_option("--header-timeout", o->session.header_timeout_s,
                  "seconds from a request's first byte to the end of its header (default 10)")->check(CLI::Range(1, 86400));
  cmd->add_option("--body-timeout", o->session.body_timeout_s,
                  "seconds to receive a request's body after its header (default 60)")->check(CLI::Range(1, 86400));
  on_run(cmd, commands, [o] { return server::run_server(*o); });
}

}  // namespace nanovllm::cli
