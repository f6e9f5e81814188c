#pragma once
// `nanovllm serve`: an OpenAI-compatible HTTP server over an AsyncLLMEngine (vLLM's api_server).
//
// One io thread (Boost.Asio) runs every connection and only moves bytes: request bodies are decoded
// (JSON, chat template, tokenizer) and large responses encoded on a small pool of worker threads;
// the engine runs on its own thread. Past --max-connections a connection gets 503, past
// --max-requests a request gets 429, both with Retry-After. The server
// listens at once and loads the model in the background (/health answers 503 until it is loaded).
// SIGTERM or SIGINT: stop accepting, let running requests finish for up to shutdown_grace_s, abort
// the rest, answer them, exit 0.
#include <functional>
#include <string>

#include "nanovllm/config.h"
#include "server/http_session.h"
#include "server/openai_request.h"

namespace nanovllm::server {

struct ServerOptions {
  Config engine;
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (the one taken is printed)
  std::string api_key;             // when set, /v1/* need "Authorization: Bearer <key>"
  std::string served_model_name;   // default: the model folder's name
  SessionOptions session;
  RequestLimits limits;
  int max_connections = 0;                 // 0: what the open-file limit allows, at most 4096
  int max_requests = 0;                    // requests being decoded, queued or generated (0: 4096)
  uint64_t max_body_bytes_in_flight = 0;   // request bodies being received (0: a quarter of memory)
  int request_threads = 2;                 // decode requests, render templates, encode large responses
  double shutdown_grace_s = 10;
  // Hooks for in-process use (tests): on_listening gets the bound port once the server accepts
  // connections; before_load runs on the loader thread before the model loads (a test holds the
  // load back with it, to see the server answer while loading).
  std::function<void(int port)> on_listening;
  std::function<void()> before_load;
};

// Runs until SIGTERM / SIGINT; returns the process exit code (0 after a clean shutdown, 1 when the
// model fails to load). Prints "nanovllm: listening on http://HOST:PORT" once bound.
int run_server(const ServerOptions& options);

}  // namespace nanovllm::server
