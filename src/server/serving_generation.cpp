// POST /v1/completions and /v1/chat/completions: a GenerationJob queues one engine request per
// prompt (n samples each) and turns their events into choices (stop strings, reasoning and tool
// calls per choice); serving_output.cpp writes the response.
#include <chrono>

#include "server/generation_job.h"
#include "util/check.h"

namespace nanovllm::server {

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
    // One engine request of n samples: they share the prompt's blocks; sample i's seed is
    // sample_seed(seed, i) (runtime/sampling_rng.h), as LLM::generate derives it.
    prompts.push_back(prompt_ids_[p]);
    params.push_back(sp);
  }
  RequestOptions options;
  options.skip_special_tokens = req_.params.skip_special_tokens;
  try {
    streams_ = ctx_.async->add_requests(std::move(prompts), params, options);
  } catch (const Error& e) {
    bad_request("", "{}", e.what());
  }
  stream_done_.assign(streams_.size(), false);
  const bool parse_tools = req_.chat && !req_.tools.is_null() && req_.tool_choice != "none";
  for (size_t i = 0; i < streams_.size() * size_t(n); ++i) {
    Choice c;
    c.index = int(i);
    c.prompt_index = int(i) / n;
    c.sample = int(i) % n;
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
      for (size_t p = 0; p < job->streams_.size(); ++p) {
        if (!job->stream_done_[p]) job->ctx_.async->abort(job->streams_[p]->request_id());
      }
    }
  });
  if (req_.stream) session_->start_stream(http::status::ok, "text/event-stream; charset=utf-8");
  for (auto& stream : streams_) stream->set_notify([self] { self->wake(); });
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
  const size_t n = size_t(req_.params.n);
  bool all_done = true;
  for (size_t p = 0; p < streams_.size(); ++p) {
    while (!stream_done_[p]) {
      std::optional<RequestEvent> e = streams_[p]->try_next();
      if (!e) break;
      NV_CHECK(e->index >= 0 && size_t(e->index) < n);
      stream_done_[p] = e->finished;
      on_event(choices_[p * n + size_t(e->index)], *e);
    }
    all_done = all_done && stream_done_[p];
  }
  if (req_.stream && !out_.empty()) session_->write_chunk(std::exchange(out_, {}));
  if (all_done) complete();
}

void GenerationJob::on_event(Choice& c, RequestEvent& e) {
  c.completion_tokens = e.num_sample_tokens;
  const bool ended = e.sample_finished();
  if (c.stop) {
    if (c.stop->stopped()) {  // aborted after a stop string: only its final event is left
      e.text.clear();
      e.logprobs.clear();
      if (ended) e.finish_reason = "stop";
    } else {
      std::string shown = c.stop->add(e.text, c.completion_tokens >= req_.params.min_tokens);
      if (c.stop->stopped()) {
        c.stop_reason = c.stop->matched();
        ctx_.async->abort_sample(streams_[size_t(c.prompt_index)]->request_id(), c.sample);
        if (ended) e.finish_reason = "stop";
      } else if (ended) {
        shown += c.stop->finish();
      }
      e.text = std::move(shown);
    }
  }
  if (ended) {
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
  stream_delta(c, e);
}

// The SSE chunks of one event of choice c.
void GenerationJob::stream_delta(Choice& c, RequestEvent& e) {
  const bool want_logprobs = req_.params.logprobs.has_value();
  const bool ended = e.sample_finished();
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
    if (ended) {
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
      if (ended) {
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
  if (ended) finish_choice_stream(c);
}

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
