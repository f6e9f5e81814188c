// The OpenAI responses of a GenerationJob: stream chunks, logprobs in the completions and chat
// shapes, usage, and the whole (non-streaming) response.
#include <cmath>

#include "server/generation_job.h"

namespace nanovllm::server {

namespace {

Json stop_reason(const Choice& c) { return c.stop_reason.empty() ? Json(nullptr) : Json(c.stop_reason); }

double finite_logprob(float v) { return std::isfinite(v) ? double(v) : -9999.0; }

}  // namespace

Json GenerationJob::chunk(Json choices) const {
  const bool with_usage = req_.include_usage && req_.continuous_usage_stats && !choices.empty();
  Json j = {{"id", id_}, {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_}, {"model", ctx_.model_name}, {"choices", std::move(choices)}};
  if (with_usage) j["usage"] = usage();  // stream_options.continuous_usage_stats: usage so far
  return j;
}

Json GenerationJob::logprobs_json(const std::vector<StepLogprobs>& lps, Choice& c) const {
  if (req_.chat) {
    Json content = Json::array();
    for (const StepLogprobs& lp : lps) {
      auto entry = [&](const Logprob& l) {
        const std::string* bytes = tokenizer().token_bytes(l.token_id);
        Json b = Json::array();
        if (bytes) for (unsigned char ch : *bytes) b.push_back(int(ch));
        return Json{{"token", token_text(l.token_id)}, {"logprob", finite_logprob(l.logprob)}, {"bytes", b}};
      };
      Json e = entry(lp.sampled);
      Json top = Json::array();
      for (const Logprob& t : lp.top) top.push_back(entry(t));
      e["top_logprobs"] = top;
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const StepLogprobs& lp : lps) {
    std::string t = token_text(lp.sampled.token_id);
    tokens.push_back(t);
    token_logprobs.push_back(finite_logprob(lp.sampled.logprob));
    Json d = Json::object();
    for (const Logprob& l : lp.top) d[token_text(l.token_id)] = finite_logprob(l.logprob);
    top.push_back(std::move(d));
    offsets.push_back(c.text_offset);
    c.text_offset += int(t.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

Json GenerationJob::echo_logprobs_json(Choice& c) const {
  const std::vector<int32_t>& ids = prompt_ids_[size_t(c.prompt_index)];
  const std::vector<StepLogprobs>& lps = prompt_logprobs_[size_t(c.prompt_index)];
  const size_t top_n = size_t(req_.params.logprobs.value_or(0));
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string t = token_text(ids[i]);
    tokens.push_back(t);
    offsets.push_back(c.text_offset);
    c.text_offset += int(t.size());
    if (i == 0 || i - 1 >= lps.size()) {  // the first token has no logprob
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    const StepLogprobs& lp = lps[i - 1];
    token_logprobs.push_back(finite_logprob(lp.sampled.logprob));
    Json d = Json::object();
    for (size_t k = 0; k < lp.top.size() && k < top_n; ++k) d[token_text(lp.top[k].token_id)] = finite_logprob(lp.top[k].logprob);
    top.push_back(std::move(d));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

void GenerationJob::append_logprobs(Json& into, const Json& more) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const Json& v : more[key]) into[key].push_back(v);
  }
}

Json GenerationJob::vllm_prompt_logprobs(int prompt_index) const {
  const std::vector<StepLogprobs>& lps = prompt_logprobs_[size_t(prompt_index)];
  Json out = Json::array({nullptr});
  for (const StepLogprobs& lp : lps) {
    Json d = Json::object();
    d[std::to_string(lp.sampled.token_id)] = {{"logprob", finite_logprob(lp.sampled.logprob)}, {"rank", lp.rank},
                                              {"decoded_token", token_text(lp.sampled.token_id)}};
    for (size_t k = 0; k < lp.top.size(); ++k) {
      const std::string id = std::to_string(lp.top[k].token_id);
      if (d.contains(id)) continue;
      d[id] = {{"logprob", finite_logprob(lp.top[k].logprob)}, {"rank", int(k) + 1},
               {"decoded_token", token_text(lp.top[k].token_id)}};
    }
    out.push_back(std::move(d));
  }
  return out;
}

Json GenerationJob::usage() const {
  int prompt = 0, completion = 0;
  for (const auto& p : prompt_ids_) prompt += int(p.size());
  for (const Choice& c : choices_) completion += c.completion_tokens;
  return {{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}};
}

void GenerationJob::finish_choice_stream(Choice& c) {
  if (c.finish_reason == "error") {
    ApiError err(500, "internal_server_error", c.error.empty() ? "generation failed" : c.error);
    send_chunk(err.to_json());
    return;
  }
  std::string reason = c.finish_reason;
  if (req_.chat && !c.calls.empty() && reason == "stop") reason = "tool_calls";
  if (c.forced && req_.tool_choice == "required" && reason == "stop") reason = "tool_calls";  // as whole_response
  if (req_.chat) {
    send_chunk(chunk(Json::array({Json{{"index", c.index}, {"delta", Json::object()}, {"logprobs", nullptr},
                                       {"finish_reason", reason}, {"stop_reason", stop_reason(c)}}})));
  } else {
    send_chunk(chunk(Json::array({Json{{"index", c.index}, {"text", ""}, {"logprobs", nullptr},
                                       {"finish_reason", reason}, {"stop_reason", stop_reason(c)}}})));
  }
}

void GenerationJob::complete() {
  completed_ = true;
  --ctx_.num_jobs;
  for (auto& stream : streams_) stream->set_notify(nullptr);  // drop the streams' references to us
  if (session_->disconnected()) return;
  if (req_.stream) {
    if (req_.include_usage) {
      Json j = chunk(Json::array());
      j["usage"] = usage();
      send_chunk(j);
    }
    out_ += "data: [DONE]\n\n";
    session_->write_chunk(std::exchange(out_, {}));
    session_->end_stream();
    return;
  }
  // A large response (many tokens, or logprobs) is encoded on a worker thread: from here on only
  // that thread touches the job (on_events returns at completed_), then the io thread sends.
  int64_t tokens = 0;
  for (const Choice& c : choices_) tokens += c.completion_tokens;
  if (tokens < kInlineResponseTokens && !req_.params.logprobs && !req_.params.prompt_logprobs && !req_.echo) {
    session_->send(whole_response());
    return;
  }
  net::post(*ctx_.workers, [self = shared_from_this()] {
    HttpResponse res = self->whole_response();
    net::post(*self->ctx_.ioc, [self, res = std::move(res)]() mutable { self->session_->send(std::move(res)); });
  });
}

// The tool calls of a forced tool_choice from the JSON the grammar held the output to
// (openai_request.cpp constrain_tool_choice): a named function's arguments, or required's array of
// {"name", "parameters"}. An output cut short (finish_reason "length") does not parse: no calls.
Json GenerationJob::forced_tool_calls(const Choice& c, const std::string& content) const {
  Json calls = Json::array();
  Json v;
  try {
    v = Json::parse(content);
  } catch (const Json::exception&) {
    return calls;
  }
  auto call = [&](const std::string& name, const Json& args) {
    calls.push_back({{"id", fmt::format("call_{}_{}_{}", id_, c.index, calls.size())},
                     {"type", "function"},
                     {"function", {{"name", name}, {"arguments", args.dump()}}}});
  };
  if (req_.tool_choice == "function") {
    call(req_.tool_choice_name, v);
  } else if (v.is_array()) {
    for (const Json& item : v)
      if (item.is_object() && item.contains("name") && item["name"].is_string() && item.contains("parameters"))
        call(item["name"].get<std::string>(), item["parameters"]);
  }
  return calls;
}

HttpResponse GenerationJob::whole_response() {
  Json choices = Json::array();
  for (Choice& c : choices_) {
    if (c.finish_reason == "error") {
      return error_response(ApiError(500, "internal_server_error", c.error.empty() ? "generation failed" : c.error));
    }
    Json lp = nullptr;
    if (req_.params.logprobs && !req_.chat && req_.echo) {
      lp = echo_logprobs_json(c);
      append_logprobs(lp, logprobs_json(c.logprobs, c));
    } else if (req_.params.logprobs) {
      lp = logprobs_json(c.logprobs, c);
    }
    if (req_.chat) {
      ReasoningDelta r = ReasoningParser::parse(c.text, starts_in_reasoning_);
      Json message = {{"role", "assistant"}};
      std::string reason = c.finish_reason;
      if (c.tools) {
        ToolDelta t = c.tools->add(r.content);
        ToolDelta tail = c.tools->finish();
        t.content += tail.content;
        for (auto& call : tail.calls) t.calls.push_back(std::move(call));
        message["content"] = t.content.empty() && !t.calls.empty() ? Json(nullptr) : Json(t.content);
        if (!t.calls.empty()) {
          Json tc = Json::array();
          for (const ToolCall& call : t.calls) {
            tc.push_back({{"id", call.id}, {"type", "function"},
                          {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
          }
          message["tool_calls"] = tc;
          if (reason == "stop") reason = "tool_calls";
        }
      } else if (req_.tool_choice == "required" || req_.tool_choice == "function") {
        message["content"] = nullptr;
        message["tool_calls"] = forced_tool_calls(c, r.content);
        if (reason == "stop" && req_.tool_choice == "required") reason = "tool_calls";
      } else {
        message["content"] = r.content;
      }
      message["reasoning_content"] = r.reasoning.empty() ? Json(nullptr) : Json(r.reasoning);
      if (!message.contains("tool_calls")) message["tool_calls"] = Json::array();
      choices.push_back({{"index", c.index}, {"message", message}, {"logprobs", lp},
                         {"finish_reason", reason}, {"stop_reason", stop_reason(c)}});
    } else {
      std::string text = req_.echo ? prompt_texts_[size_t(c.prompt_index)] + c.text : c.text;
      choices.push_back({{"index", c.index}, {"text", text}, {"logprobs", lp},
                         {"finish_reason", c.finish_reason}, {"stop_reason", stop_reason(c)}});
    }
    if (req_.return_prompt_logprobs) choices.back()["prompt_logprobs"] = vllm_prompt_logprobs(c.prompt_index);
  }
  Json body = {{"id", id_}, {"object", req_.chat ? "chat.completion" : "text_completion"},
               {"created", created_}, {"model", ctx_.model_name}, {"choices", choices}, {"usage", usage()}};
  return json_response(http::status::ok, body);
}

}  // namespace nanovllm::server
