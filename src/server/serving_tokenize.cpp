// POST /tokenize and /detokenize (vLLM's): pure functions of the body and the model, run on the
// server's worker threads.
#include "server/serving_context.h"
#include "util/check.h"

namespace nanovllm::server {

using Json = nlohmann::ordered_json;

HttpResponse tokenize_response(std::string_view text_body, const ModelView& model) {
  Json body = decode_json(text_body, model.limits.json);
  if (!body.is_object()) bad_request("", "the body must be a JSON object");
  std::string text;
  if (body.contains("messages")) {
    OpenAIRequest r = openai_request_from_json(body, /*chat=*/true, model.limits);
    if (!model.chat_template) bad_request("messages", "chat template: {}", model.template_error);
    try {
      text = model.chat_template->render(r.messages, r.tools, r.add_generation_prompt, r.chat_template_kwargs);
    } catch (const Error& e) {
      bad_request("messages", "chat template: {}", e.what());
    }
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    text = body["prompt"].get<std::string>();
  } else {
    bad_request("prompt", "'prompt' (a string) or 'messages' is required");
  }
  std::vector<int32_t> ids;
  try {
    // vLLM's add_special_tokens defaults: true for a prompt, false for messages (the template
    // writes them).
    ids = body.contains("messages") ? model.tokenizer->encode(text)
                                    : model.tokenizer->encode_with_special_tokens(text);
  } catch (const Error& e) {
    bad_request("prompt", "{}", e.what());
  }
  Json out = {{"count", ids.size()}, {"max_model_len", model.max_model_len}, {"tokens", ids}};
  return json_response(http::status::ok, out);
}

HttpResponse detokenize_response(std::string_view text_body, const ModelView& model) {
  Json body = decode_json(text_body, model.limits.json);
  if (!body.is_object()) bad_request("", "the body must be a JSON object");
  if (!body.contains("tokens") || !body["tokens"].is_array()) bad_request("tokens", "'tokens' (an array of token ids) is required");
  const Tokenizer& tok = *model.tokenizer;
  std::vector<int32_t> ids;
  for (const Json& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab_size()) {
      bad_request("tokens", "'tokens' must hold token ids in [0, {})", tok.vocab_size());
    }
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return json_response(http::status::ok, Json{{"prompt", tok.decode(ids)}});
}

}  // namespace nanovllm::server
