// POST /v1/completions and /v1/chat/completions: a GenerationJob queues one engine request per
// prompt (n samples each) and turns their events into choices (stop strings, reasoning and tool
// calls per choice); serving_output.cpp writes the response.
#include <chrono>

#include "server/generation_job.h"
#include "util/check.h"

namespace nanovllm::server {

void GenerationJob::start() {
  std::vector<std::vector<int32_t>> prompts = prompt_ids_;  // one engine request of n samples per
  // prompt: they share the prompt's blocks; sample i's seed is sample_seed(seed, i)
  // (runtime/sampling_rng.h), as LLM::generate derives it.
  const int n = req_.params.n;
  RequestOptions options;
  options.skip_special_tokens = req_.params.skip_special_tokens;
  try {
    streams_ = ctx_.async->add_requests(std::move(prompts), params_, options);
  } catch (const Error& e) {
    bad_request("", "{}", e.what());
  }
  stream_done_.assign(streams_.size(), false);
  prompt_logprobs_.assign(streams_.size(), {});
  // "auto": the model's own tool-call format (hermes) is parsed from the text; "required" and a
  // named function constrain the output to JSON instead (whole_response parses it).
  const bool parse_tools = req_.chat && !req_.tools.is_null() && req_.tool_choice == "auto";
  for (size_t i = 0; i < streams_.size() * size_t(n); ++i) {
    Choice c;
    c.index = int(i);
    c.prompt_index = int(i) / n;
    c.sample = int(i) % n;
    if (!req_.params.stop.empty()) c.stop.emplace(req_.params.stop, req_.params.include_stop_str_in_output);
    if (req_.chat) {
      c.reasoning.emplace(starts_in_reasoning_);
      if (parse_tools) c.tools.emplace(fmt::format("call_{}_{}_", id_, i));
      if (req_.stream && (req_.tool_choice == "required" || req_.tool_choice == "function")) {
        c.forced.emplace(req_.tool_choice == "function" ? req_.tool_choice_name : std::string(),
                         fmt::format("call_{}_{}_", id_, i));
      }
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
  if (!e.prompt_logprobs.empty()) prompt_logprobs_[size_t(c.prompt_index)] = std::move(e.prompt_logprobs);
  if (req_.echo_only) {  // max_tokens 0: the token sampled after the prompt is not shown
    e.token_ids.clear(), e.text.clear(), e.logprobs.clear();
    e.num_sample_tokens = 0;
    if (e.sample_finished() && e.finish_reason != "error") e.finish_reason = "length";
  }
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
  Json lp = nullptr;
  if (!req_.chat && req_.echo && want_logprobs && !c.started) {  // the prompt's tokens come first
    lp = echo_logprobs_json(c);
    append_logprobs(lp, logprobs_json(e.logprobs, c));
  } else if (want_logprobs && !e.logprobs.empty()) {
    lp = logprobs_json(e.logprobs, c);
  }
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
    if (c.forced) {  // the constrained JSON goes out as tool_calls deltas, never as content
      Json tc = c.forced->add(content);
      content.clear();
      if (!tc.empty()) delta["tool_calls"] = std::move(tc);
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

void start_generation(ServingContext& ctx, const std::shared_ptr<HttpSession>& session, DecodedRequest decoded) {
  auto job = std::make_shared<GenerationJob>(ctx, session, std::move(decoded));
  try {
    job->start();
  } catch (const Error& e) {  // the engine's checks
    throw ApiError(400, "invalid_request_error", e.what());
  }
}

}  // namespace nanovllm::server
