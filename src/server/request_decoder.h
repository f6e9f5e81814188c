#pragma once
// What a completions or chat request becomes before it reaches the engine: the checked
// OpenAIRequest, each prompt's token ids (chat: the model's template rendered, then tokenized), the
// texts `echo` needs, and each prompt's SamplingParams with max_tokens resolved against the
// context. Pure and thread-safe (it only reads the tokenizer and the template), so the server runs
// it on its worker threads, off the io thread, and tests/fuzz/http_request_fuzz.cpp feeds it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm::server {

// What decoding needs of the served model (immutable once the model is loaded).
struct ModelView {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // nullptr: chat requests answer 400 with template_error
  std::string template_error;
  std::string model_name;  // a request naming another model gets 404
  int max_model_len = 0;
  RequestLimits limits;
};

struct DecodedRequest {
  OpenAIRequest req;
  std::vector<std::vector<int32_t>> prompt_ids;  // [num_prompts][prompt_len]
  std::vector<std::string> prompt_texts;         // [num_prompts] for echo ("" without it)
  std::vector<SamplingParams> params;            // [num_prompts] max_tokens resolved
  bool starts_in_reasoning = false;              // chat: the rendered prompt opens <think>
};

// Decodes a POST /v1/completions (chat = false) or /v1/chat/completions body. Throws ApiError
// (400 naming the field, 404 for another model's name).
DecodedRequest decode_generation_request(std::string_view body, bool chat, const ModelView& model);

}  // namespace nanovllm::server
