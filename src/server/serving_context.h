#pragma once
// What request handlers share: the engine, the model's name, limits, and response helpers.
#include <atomic>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/async_llm_engine.h"
#include "server/api_error.h"
#include "server/http_session.h"
#include "server/openai_request.h"
#include "server/request_decoder.h"

namespace nanovllm::server {

struct ServingContext {
  net::io_context* ioc = nullptr;
  net::thread_pool* workers = nullptr;  // CPU-heavy work: decoding, templates, large responses
  AsyncLLMEngine* async = nullptr;  // set once the model is loaded
  LLMEngine* engine = nullptr;      // for its immutable parts: config, tokenizer, chat template
  std::string model_name;           // what /v1/models lists and requests must name
  RequestLimits limits;
  int64_t next_id = 0;              // io thread only
  std::atomic<int> num_jobs{0};     // generation requests being answered
  bool shutting_down = false;       // io thread only
};

inline HttpResponse json_response(http::status status, const nlohmann::ordered_json& body) {
  HttpResponse res(status, 11);
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return res;
}

inline HttpResponse error_response(const ApiError& e) {
  return json_response(http::status(e.status), e.to_json());
}

// POST /tokenize and /detokenize (serving_tokenize.cpp). Throw ApiError.
HttpResponse tokenize_response(std::string_view body, const ModelView& model);
HttpResponse detokenize_response(std::string_view body, const ModelView& model);

// Starts answering a decoded completions or chat completions request (io thread). Throws ApiError
// if the engine refuses it.
void start_generation(ServingContext& ctx, const std::shared_ptr<HttpSession>& session, DecodedRequest decoded);

}  // namespace nanovllm::server
