#include "server/request_decoder.h"

#include <algorithm>

#include "util/check.h"

namespace nanovllm::server {

namespace {

using Json = nlohmann::ordered_json;

// Renders the chat template (continuing the final assistant message when asked) into d.
void prepare_chat_prompt(DecodedRequest& d, const ModelView& model) {
  const OpenAIRequest& r = d.req;
  if (!model.chat_template) {
    throw ApiError(400, "invalid_request_error", fmt::format("chat template: {}", model.template_error), "messages");
  }
  std::string text;
  try {
    Json tools = r.tool_choice == "none" ? Json(nullptr) : r.tools;
    text = model.chat_template->render(r.messages, tools, r.add_generation_prompt, r.chat_template_kwargs);
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", fmt::format("chat template: {}", e.what()), "messages");
  }
  if (r.continue_final_message) {
    // The template closes the last message; continue it instead: cut at its content's end.
    const Json& last = r.messages.back();
    if (last.value("role", "") == "assistant" && last["content"].is_string()) {
      const std::string& content = last["content"].get_ref<const std::string&>();
      size_t at = text.rfind(content);
      if (at != std::string::npos) text.resize(at + content.size());
    }
  }
  d.starts_in_reasoning = text.size() >= 8 && text.rfind("<think>") != std::string::npos &&
                          text.find("</think>", text.rfind("<think>")) == std::string::npos;
  d.prompt_ids.push_back(model.tokenizer->encode(text, true, size_t(model.max_model_len)));
  d.prompt_texts.push_back(std::move(text));
}

void prepare_prompts(DecodedRequest& d, const ModelView& model) {
  if (d.req.chat) return prepare_chat_prompt(d, model);
  for (PromptInput& p : d.req.prompts) {
    if (p.is_tokens) {
      d.prompt_texts.push_back(d.req.echo ? model.tokenizer->decode(p.token_ids) : "");
      d.prompt_ids.push_back(std::move(p.token_ids));
    } else {
      // A raw prompt gets the post-processor's special tokens (Llama's BOS), as in vLLM; a chat
      // prompt has them in its rendered text.
      d.prompt_ids.push_back(
          model.tokenizer->encode_with_special_tokens(p.text, true, size_t(model.max_model_len)));
      d.prompt_texts.push_back(d.req.echo ? std::move(p.text) : std::string());
    }
  }
  d.req.prompts.clear();  // moved into prompt_ids / prompt_texts
}

}  // namespace

DecodedRequest decode_generation_request(std::string_view body, bool chat, const ModelView& model) {
  NV_CHECK(model.tokenizer != nullptr);
  DecodedRequest d;
  d.req = parse_openai_request(body, chat, model.limits);
  OpenAIRequest& r = d.req;
  if (!r.model.empty() && r.model != model.model_name) {
    throw ApiError(404, "not_found_error",
                   fmt::format("The model '{}' does not exist (this server serves '{}')", r.model, model.model_name),
                   "model", "model_not_found");
  }
  try {
    prepare_prompts(d, model);
  } catch (const Error& e) {  // the tokenizer's: invalid UTF-8 and the like
    throw ApiError(400, "invalid_request_error", e.what(), chat ? "messages" : "prompt");
  }
  const int max_model_len = model.max_model_len;
  for (const std::vector<int32_t>& ids : d.prompt_ids) {
    const int64_t len = int64_t(ids.size());
    if (len == 0) bad_request(chat ? "messages" : "prompt", "the prompt is empty");
    if (len >= max_model_len) {  // a text's encoding stops past max_model_len ids: "at least"
      bad_request(chat ? "messages" : "prompt",
                  "This model's maximum context length is {} tokens, but the prompt has {}{} tokens",
                  max_model_len, len > max_model_len ? "at least " : "", len);
    }
    SamplingParams sp = r.params;
    if (!r.max_tokens_given) {
      sp.max_tokens = int(chat ? max_model_len - len : std::min<int64_t>(16, max_model_len - len));
    } else if (len + sp.max_tokens > max_model_len) {
      bad_request("max_tokens",
                  "This model's maximum context length is {} tokens. However, you requested {} tokens "
                  "({} in the prompt, {} in the completion)", max_model_len, len + sp.max_tokens,
                  len, sp.max_tokens);
    }
    d.params.push_back(std::move(sp));
  }
  return d;
}

}  // namespace nanovllm::server
