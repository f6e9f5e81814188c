#pragma once
// GenerationJob: one POST /v1/completions or /v1/chat/completions request. Each prompt is one
// engine request with n samples (they share the prompt's KV blocks); choice i is sample i % n of
// prompt i / n. serving_generation.cpp takes the engine's events, serving_output.cpp writes the
// OpenAI response (whole, or as server-sent events).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/stop_checker.h"
#include "server/forced_tool_stream.h"
#include "server/reasoning_parser.h"
#include "server/request_decoder.h"
#include "server/serving_context.h"
#include "server/tool_parser.h"

namespace nanovllm::server {

using Json = nlohmann::ordered_json;

// choices[i] of the response: sample `sample` of prompt `prompt_index` (index = prompt * n + sample).
struct Choice {
  int index = 0;
  int prompt_index = 0;
  int sample = 0;  // RequestEvent::index within its prompt's engine request
  std::string text;                    // completion text so far (completions, and chat raw)
  std::vector<StepLogprobs> logprobs;  // whole responses
  std::string finish_reason, error;
  int completion_tokens = 0;
  bool done = false;
  bool started = false;  // stream: the first chunk (chat role / completions echo) went out
  std::optional<StopChecker> stop;  // stop strings: applied to the streamed text here
  std::string stop_reason;          // the stop string that matched
  std::optional<ReasoningParser> reasoning;
  std::optional<ToolParser> tools;
  std::optional<ForcedToolStream> forced;  // stream with tool_choice "required" or a named function
  std::string content, reasoning_content;  // chat, parsed
  std::vector<ToolCall> calls;
  int text_offset = 0;  // completions logprobs: offset of the next token's text
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  // Whole responses of fewer completion tokens (and no logprobs or echo) are encoded on the io
  // thread; larger ones on a worker.
  static constexpr int64_t kInlineResponseTokens = 256;

  GenerationJob(ServingContext& ctx, std::shared_ptr<HttpSession> session, DecodedRequest decoded)
      : ctx_(ctx),
        session_(std::move(session)),
        req_(std::move(decoded.req)),
        prompt_ids_(std::move(decoded.prompt_ids)),
        prompt_texts_(std::move(decoded.prompt_texts)),
        params_(std::move(decoded.params)),
        starts_in_reasoning_(decoded.starts_in_reasoning) {
    const int64_t id = ctx_.next_id++;
    id_ = (req_.chat ? "chatcmpl-" : "cmpl-") + std::to_string(id);
    created_ = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count();
  }

  // Queues the engine requests and starts answering (io thread). ApiError if the engine refuses.
  void start();

 private:
  void wake();
  void on_events();
  void on_event(Choice& c, RequestEvent& e);
  void stream_delta(Choice& c, RequestEvent& e);
  void finish_choice_stream(Choice& c);
  void complete();
  HttpResponse whole_response();
  // A forced tool_choice's calls, parsed from the constrained JSON output (serving_output.cpp).
  nlohmann::ordered_json forced_tool_calls(const Choice& c, const std::string& content) const;
  Json chunk(Json choices) const;
  void send_chunk(const Json& j) { out_ += "data: " + dump(j) + "\n\n"; }
  static std::string dump(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  Json logprobs_json(const std::vector<StepLogprobs>& lps, Choice& c) const;
  // Completions logprobs of choice c's echoed prompt: its tokens, null for the first one's
  // logprob and top (vLLM's shape), then each prompt token's.
  Json echo_logprobs_json(Choice& c) const;
  static void append_logprobs(Json& into, const Json& more);
  // vLLM's choice["prompt_logprobs"]: null, then {"<id>": {logprob, rank, decoded_token}} per token.
  Json vllm_prompt_logprobs(int prompt_index) const;
  Json usage() const;
  std::string token_text(int32_t id) const { return tokenizer().decode({id}, false); }
  const Tokenizer& tokenizer() const { return ctx_.engine->require_tokenizer(); }

  ServingContext& ctx_;
  std::shared_ptr<HttpSession> session_;
  OpenAIRequest req_;
  std::string id_;
  int64_t created_ = 0;
  std::vector<std::vector<int32_t>> prompt_ids_;
  std::vector<std::string> prompt_texts_;  // for echo
  std::vector<SamplingParams> params_;     // per prompt
  bool starts_in_reasoning_ = false;
  std::vector<std::shared_ptr<RequestStream>> streams_;  // one per prompt, n samples each
  std::vector<bool> stream_done_;
  std::vector<std::vector<StepLogprobs>> prompt_logprobs_;  // per prompt, once computed
  std::vector<Choice> choices_;
  std::atomic<bool> posted_{false};
  std::string out_;  // SSE bytes to write
  bool completed_ = false;
};

}  // namespace nanovllm::server
