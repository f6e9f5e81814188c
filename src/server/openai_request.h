#pragma once
// The JSON body of POST /v1/completions and /v1/chat/completions -> a checked request with its
// SamplingParams (vLLM's protocol.py). Pure: no model, no tokenizer, so it can be fuzzed
// (tests/fuzz/http_request_fuzz.cpp). Every malformed or out-of-range field throws ApiError 400 naming
// the field; unknown fields are ignored, as OpenAI and vLLM do.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/sampling_params.h"
#include "server/api_error.h"
#include "server/json_decoder.h"

namespace nanovllm::server {

// A completions prompt: text or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> token_ids;
  bool is_tokens = false;
};

struct OpenAIRequest {
  bool chat = false;
  std::string model;                    // empty: not given
  // completions: one or more prompts (a batch); chat: none (messages instead)
  std::vector<PromptInput> prompts;
  nlohmann::ordered_json messages;      // chat
  nlohmann::ordered_json tools;         // chat: null or an array of {"type": "function", ...}
  std::string tool_choice = "auto";     // "none" | "auto" | "required" | "function" (named)
  std::string tool_choice_name;         // the function a named tool_choice forces
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  SamplingParams params;                // max_tokens left at 0 when the request did not say
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats
  bool echo = false;                    // completions: the prompt is prepended to the text (and,
                                        // with logprobs, its tokens to the logprobs: vLLM's rule)
  bool echo_only = false;               // completions: echo with max_tokens 0 (the prompt alone:
                                        // lm-evaluation-harness's loglikelihood requests)
  int top_logprobs = 0;                 // chat: candidates per token when params.logprobs is set
  bool return_prompt_logprobs = false;  // vLLM's `prompt_logprobs` field was given
};

struct RequestLimits {
  int max_n = 128;
  int max_logprobs = 20;
  int max_prompts = 1024;        // prompts in one completions batch
  int max_stop_strings = 64;
  int max_logit_bias = 1024;
  JsonLimits json;               // the body as JSON: depth, keys, array and string sizes
};

// Parses (decode_json, under limits.json) and checks the body. Throws ApiError (400) naming the
// field.
OpenAIRequest parse_openai_request(std::string_view body, bool chat, const RequestLimits& limits = {});
// The same for a body already parsed.
OpenAIRequest openai_request_from_json(const nlohmann::ordered_json& body, bool chat, const RequestLimits& limits = {});

}  // namespace nanovllm::server
