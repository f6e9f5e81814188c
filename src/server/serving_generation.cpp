// POST /v1/completions and /v1/chat/completions: one GenerationJob per request turns the engine's
// streams into OpenAI responses, whole or as server-sent events.
#include <chrono>
#include <cmath>
#include <optional>

#include "engine/stop_checker.h"
#include "runtime/sampling_rng.h"
#include "server/reasoning_parser.h"
#include "server/serving_context.h"
#include "server/tool_parser.h"
#include "util/check.h"

namespace nanovllm::server {

namespace {

using Json = nlohmann::ordered_json;

struct Choice {
  int index = 0;
  int prompt_index = 0;
  std::shared_ptr<RequestStream> stream;
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
  std::string content, reasoning_content;  // chat, parsed
  std::vector<ToolCall> calls;
  int text_offset = 0;  // completions logprobs: offset of the next token's text
};

Json stop_reason(const Choice& c) { return c.stop_reason.empty() ? Json(nullptr) : Json(c.stop_reason); }

double finite_logprob(float v) { return std::isfinite(v) ? double(v) : -9999.0; }

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(ServingContext& ctx, std::shared_ptr<HttpSession> session, OpenAIRequest request)
      : ctx_(ctx), session_(std::move(session)), req_(std::move(request)) {
    const int64_t id = ctx_.next_id++;
    id_ = (req_.chat ? "chatcmpl-" : "cmpl-") + std::to_string(id);
    created_ = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count();
  }

  // Validates against the model, queues the requests and starts answering. ApiError if invalid.
  void start();

 private:
  void prepare_prompts();
  void wake();
  void on_events();
  void on_event(Choice& c, RequestEvent& e);
  void finish_choice_stream(Choice& c);
  void complete();
  Json chunk(Json choices) const;
  void send_chunk(const Json& j) { out_ += "data: " + dump(j) + "\n\n"; }
  static std::string dump(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  Json logprobs_json(const std::vector<StepLogprobs>& lps, Choice& c) const;
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
  bool starts_in_reasoning_ = false;
  std::vector<Choice> choices_;
  std::atomic<bool> posted_{false};
  std::string out_;  // SSE bytes to write
  bool completed_ = false;
};

void GenerationJob::prepare_prompts() {
  const Tokenizer& tok = tokenizer();
  if (req_.chat) {
    std::string text;
    try {
      Json tools = req_.tool_choice == "none" ? Json(nullptr) : req_.tools;
      text = ctx_.engine->chat_template().render(req_.messages, tools, req_.add_generation_prompt,
                                                 req_.chat_template_kwargs);
    } catch (const Error& e) {
      throw ApiError(400, "invalid_request_error", fmt::format("chat template: {}", e.what()), "messages");
    }
    if (req_.continue_final_message) {
      // The template closes the last message; continue it instead: cut at its content's end.
      const Json& last = req_.messages.back();
      if (last.value("role", "") == "assistant" && last["content"].is_string()) {
        const std::string& content = last["content"].get_ref<const std::string&>();
        size_t at = text.rfind(content);
        if (at != std::string::npos) text.resize(at + content.size());
      }
    }
    starts_in_reasoning_ = text.size() >= 8 && text.rfind("<think>") != std::string::npos &&
                           text.find("</think>", text.rfind("<think>")) == std::string::npos;
    prompt_ids_.push_back(tok.encode(text));
    prompt_texts_.push_back(std::move(text));
    return;
  }
  for (PromptInput& p : req_.prompts) {
    if (p.is_tokens) {
      prompt_texts_.push_back(req_.echo ? tok.decode(p.token_ids) : "");
      prompt_ids_.push_back(std::move(p.token_ids));
    } else {
      prompt_ids_.push_back(tok.encode(p.text));
      prompt_texts_.push_back(std::move(p.text));
    }
  }
}

void GenerationJob::start() {
  if (!req_.model.empty() && req_.model != ctx_.model_name) {
    throw ApiError(404, "not_found_error",
                   fmt::format("The model '{}' does not exist (this server serves '{}')", req_.model, ctx_.model_name),
                   "model", "model_not_found");
  }
  prepare_prompts();
  const int max_model_len = ctx_.engine->config().max_model_len;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  const int n = req_.params.n;
  for (size_t p = 0; p < prompt_ids_.size(); ++p) {
    const int len = int(prompt_ids_[p].size());
    if (len == 0) bad_request(req_.chat ? "messages" : "prompt", "the prompt is empty");
    if (len >= max_model_len) {
      bad_request(req_.chat ? "messages" : "prompt",
                  "This model's maximum context length is {} tokens, but the prompt has {} tokens",
                  max_model_len, len);
    }
    SamplingParams sp = req_.params;
    if (!req_.max_tokens_given) {
      sp.max_tokens = req_.chat ? max_model_len - len : std::min(16, max_model_len - len);
    } else if (int64_t(len) + sp.max_tokens > max_model_len) {
      bad_request("max_tokens",
                  "This model's maximum context length is {} tokens. However, you requested {} tokens "
                  "({} in the prompt, {} in the completion)", max_model_len, int64_t(len) + sp.max_tokens,
                  len, sp.max_tokens);
    }
    sp.n = 1;  // the n samples are n requests; sample i's seed as LLM::generate derives it
    for (int i = 0; i < n; ++i) {
      SamplingParams si = sp;
      if (sp.seed) si.seed = sample_seed(*sp.seed, i);
      prompts.push_back(prompt_ids_[p]);
      params.push_back(si);
    }
  }
  RequestOptions options;
  options.skip_special_tokens = req_.params.skip_special_tokens;
  std::vector<std::shared_ptr<RequestStream>> streams;
  try {
    streams = ctx_.async->add_requests(std::move(prompts), params, options);
  } catch (const Error& e) {
    bad_request("", "{}", e.what());
  }
  const bool parse_tools = req_.chat && !req_.tools.is_null() && req_.tool_choice != "none";
  for (size_t i = 0; i < streams.size(); ++i) {
    Choice c;
    c.index = int(i);
    c.prompt_index = int(i) / n;
    c.stream = streams[i];
    if (!req_.params.stop.empty()) c.stop.emplace(req_.params.stop, req_.params.include_stop_str_in_output);
    if (req_.chat) {
      c.reasoning.emplace(starts_in_reasoning_);
      if (parse_tools) c.tools.emplace(fmt::format("call_{}_{}_", id_, i));
    }
    choices_.push_back(std::move(c));
  }
  ++ctx_.num_jobs;
  auto self = shared_from_this();
  std::weak_ptr<GenerationJob> weak = self;
  session_->on_disconnect([weak] {
    if (auto job = weak.lock()) {
      for (Choice& c : job->choices_) {
        if (!c.done) job->ctx_.async->abort(c.stream->request_id());
      }
    }
  });
  if (req_.stream) session_->start_stream(http::status::ok, "text/event-stream; charset=utf-8");
  for (Choice& c : choices_) c.stream->set_notify([self] { self->wake(); });
  net::post(*ctx_.ioc, [self] { self->on_events(); });  // events that came before the notify
}

void GenerationJob::wake() {
  if (posted_.exchange(true)) return;
  net::post(*ctx_.ioc, [self = shared_from_this()] {
    self->posted_ = false;
    self->on_events();
  });
}

void GenerationJob::on_events() {
  if (completed_) return;
  bool all_done = true;
  for (Choice& c : choices_) {
    while (!c.done) {
      std::optional<RequestEvent> e = c.stream->try_next();
      if (!e) break;
      on_event(c, *e);
    }
    all_done = all_done && c.done;
  }
  if (req_.stream && !out_.empty()) session_->write_chunk(std::exchange(out_, {}));
  if (all_done) complete();
}

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

Json GenerationJob::usage() const {
  int prompt = 0, completion = 0;
  for (const auto& p : prompt_ids_) prompt += int(p.size());
  for (const Choice& c : choices_) completion += c.completion_tokens;
  return {{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}};
}

void GenerationJob::on_event(Choice& c, RequestEvent& e) {
  c.completion_tokens = e.num_completion_tokens;
  if (c.stop) {
    if (c.stop->stopped()) {  // aborted after a stop string: only its final event is left
      e.text.clear();
      e.logprobs.clear();
      if (e.finished) e.finish_reason = "stop";
    } else {
      std::string shown = c.stop->add(e.text, c.completion_tokens >= req_.params.min_tokens);
      if (c.stop->stopped()) {
        c.stop_reason = c.stop->matched();
        ctx_.async->abort(c.stream->request_id());
        if (e.finished) e.finish_reason = "stop";
      } else if (e.finished) {
        shown += c.stop->finish();
      }
      e.text = std::move(shown);
    }
  }
  if (e.finished) {
    c.done = true;
    c.finish_reason = e.finish_reason;
    c.error = e.error;
  }
  const bool want_logprobs = req_.params.logprobs.has_value();
  if (!req_.stream) {
    c.text += e.text;
    if (want_logprobs) for (auto& lp : e.logprobs) c.logprobs.push_back(std::move(lp));
    return;
  }
  // Streaming.
  Json lp = want_logprobs && !e.logprobs.empty() ? logprobs_json(e.logprobs, c) : Json(nullptr);
  if (!req_.chat) {
    std::string text = std::move(e.text);
    if (!c.started) {
      c.started = true;
      if (req_.echo) text = prompt_texts_[size_t(c.prompt_index)] + text;
    }
    if (!text.empty() || !lp.is_null()) {
      send_chunk(chunk(Json::array({Json{{"index", c.index}, {"text", text}, {"logprobs", lp},
                                         {"finish_reason", nullptr}, {"stop_reason", nullptr}}})));
    }
  } else {
    if (!c.started) {
      c.started = true;
      send_chunk(chunk(Json::array({Json{{"index", c.index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr}, {"finish_reason", nullptr}}})));
    }
    ReasoningDelta r = c.reasoning->add(e.text);
    if (e.finished) {
      ReasoningDelta tail = c.reasoning->finish();
      r.reasoning += tail.reasoning;
      r.content += tail.content;
    }
    Json delta = Json::object();
    if (!r.reasoning.empty()) delta["reasoning_content"] = r.reasoning;
    std::string content = std::move(r.content);
    std::vector<ToolCall> calls;
    if (c.tools) {
      ToolDelta t = c.tools->add(content);
      if (e.finished) {
        ToolDelta tail = c.tools->finish();
        t.content += tail.content;
        for (auto& call : tail.calls) t.calls.push_back(std::move(call));
      }
      content = std::move(t.content);
      calls = std::move(t.calls);
    }
    if (!content.empty()) delta["content"] = content;
    if (!calls.empty()) {
      Json tc = Json::array();
      for (const ToolCall& call : calls) {
        tc.push_back({{"index", int(c.calls.size())}, {"id", call.id}, {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        c.calls.push_back(call);
      }
      delta["tool_calls"] = tc;
    }
    if (!delta.empty() || !lp.is_null()) {
      send_chunk(chunk(Json::array({Json{{"index", c.index}, {"delta", delta}, {"logprobs", lp},
                                         {"finish_reason", nullptr}}})));
    }
  }
  if (e.finished) finish_choice_stream(c);
}

void GenerationJob::finish_choice_stream(Choice& c) {
  if (c.finish_reason == "error") {
    ApiError err(500, "internal_server_error", c.error.empty() ? "generation failed" : c.error);
    send_chunk(err.to_json());
    return;
  }
  std::string reason = c.finish_reason;
  if (req_.chat && !c.calls.empty() && reason == "stop") reason = "tool_calls";
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
  for (Choice& c : choices_) c.stream->set_notify(nullptr);  // drop the streams' references to us
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
  Json choices = Json::array();
  for (Choice& c : choices_) {
    if (c.finish_reason == "error") {
      session_->send(error_response(ApiError(500, "internal_server_error",
                                             c.error.empty() ? "generation failed" : c.error)));
      return;
    }
    Json lp = req_.params.logprobs ? logprobs_json(c.logprobs, c) : Json(nullptr);
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
  }
  Json body = {{"id", id_}, {"object", req_.chat ? "chat.completion" : "text_completion"},
               {"created", created_}, {"model", ctx_.model_name}, {"choices", choices}, {"usage", usage()}};
  session_->send(json_response(http::status::ok, body));
}

}  // namespace

void handle_generation(ServingContext& ctx, const std::shared_ptr<HttpSession>& session,
                       const HttpRequest& request, bool chat) {
  OpenAIRequest req = parse_openai_request(request.body(), chat, ctx.limits);
  auto job = std::make_shared<GenerationJob>(ctx, session, std::move(req));
  try {
    job->start();
  } catch (const Error& e) {  // from the tokenizer or the engine's checks
    throw ApiError(400, "invalid_request_error", e.what());
  }
}

}  // namespace nanovllm::server
