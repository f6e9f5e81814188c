#include "engine/async_llm_engine.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "tokenizer/incremental_detokenizer.h"
#include "util/check.h"

namespace nanovllm {

using Clock = std::chrono::steady_clock;

// One request in flight: its n samples are LLMEngine's sequences seq_id .. seq_id + n - 1.
struct AsyncLLMEngine::Active {
  struct Sample {
    std::optional<IncrementalDetokenizer> detokenizer;
    int num_tokens = 0;
    bool ended = false;
    Clock::time_point last_token;
  };
  int64_t request_id = 0;
  int64_t seq_id = -1;  // sample 0's
  std::shared_ptr<RequestStream> stream;
  std::vector<Sample> samples;
  int num_ended = 0;
  int num_prompt_tokens = 0;
  int num_completion_tokens = 0;  // all samples
  bool logprobs = false;  // SamplingParams::logprobs set: RequestEvent::logprobs filled
  Clock::time_point arrival;
};

namespace {
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

AsyncLLMEngine::AsyncLLMEngine(LLMEngine& engine) : engine_(engine) {
  update_gauges();
  thread_ = std::thread([this] { loop(); });
}

AsyncLLMEngine::~AsyncLLMEngine() { shutdown(); }

void AsyncLLMEngine::shutdown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> AsyncLLMEngine::add_request(std::vector<int32_t> prompt,
                                                           const SamplingParams& params,
                                                           const RequestOptions& options) {
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(std::move(prompt));
  try {
    return add_requests(std::move(prompts), {params}, options)[0];
  } catch (const Error& e) {
    // add_requests prefixes "request 0: "; one request needs no index.
    std::string msg = e.what();
    const std::string prefix = "request 0: ";
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    throw Error(msg);
  }
}

std::vector<std::shared_ptr<RequestStream>> AsyncLLMEngine::add_requests(
    std::vector<std::vector<int32_t>> prompts, const std::vector<SamplingParams>& params,
    const RequestOptions& options) {
  return add_requests(std::move(prompts), params, std::vector<RequestOptions>{options});
}

std::vector<std::shared_ptr<RequestStream>> AsyncLLMEngine::add_requests(
    std::vector<std::vector<int32_t>> prompts, const std::vector<SamplingParams>& params,
    const std::vector<RequestOptions>& options) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    fail("{} sampling params for {} prompts (give 1 or one per prompt)", params.size(), prompts.size());
  }
  if (options.size() != 1 && options.size() != prompts.size()) {
    fail("{} request options for {} prompts (give 1 or one per prompt)", options.size(), prompts.size());
  }
  auto param = [&](size_t i) -> const SamplingParams& { return params[params.size() == 1 ? 0 : i]; };
  auto option = [&](size_t i) -> const RequestOptions& { return options[options.size() == 1 ? 0 : i]; };
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      engine_.validate(prompts[i], param(i));  // const: reads the immutable config only
      engine_.compile_structured(param(i));    // thread-safe: a bad grammar is refused here
    } catch (const Error& e) {
      fail("request {}: {}", i, e.what());
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    if (option(i).detokenize) engine_.require_tokenizer();
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<Pending> adds;
  const auto now = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto stream = std::make_shared<RequestStream>(next_request_id_++);
    streams.push_back(stream);
    adds.push_back({std::move(prompts[i]), param(i), option(i), stream, now});
  }
  {
    std::lock_guard lock(mu_);
    if (stop_) fail("the engine is shutting down");
    num_unfinished_ += int(adds.size());
    for (auto& a : adds) pending_adds_.push_back(std::move(a));
  }
  cv_.notify_all();
  return streams;
}

void AsyncLLMEngine::abort(int64_t request_id) { abort_sample(request_id, -1); }

void AsyncLLMEngine::abort_sample(int64_t request_id, int index) {
  {
    std::lock_guard lock(mu_);
    pending_aborts_.push_back({request_id, index});
  }
  cv_.notify_all();
}

void AsyncLLMEngine::set_step_observer(std::function<void(const StepInfo&)> observer) {
  std::lock_guard lock(metrics_mu_);
  step_observer_ = std::move(observer);
}

EngineMetrics AsyncLLMEngine::metrics() const {
  std::lock_guard lock(metrics_mu_);
  return metrics_;
}

void AsyncLLMEngine::loop() {
  for (;;) {
    std::vector<Pending> adds;
    std::vector<AbortOf> aborts;
    bool stopping;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !pending_adds_.empty() || !pending_aborts_.empty() || !active_.empty();
      });
      adds = std::exchange(pending_adds_, {});
      aborts = std::exchange(pending_aborts_, {});
      stopping = stop_;
    }
    admit(adds);
    apply_aborts(aborts, "abort", "");
    if (stopping) {
      apply_aborts(all_active(), "abort", "");
      flush_notifies();
      return;
    }
    if (!active_.empty()) run_step();
    flush_notifies();
  }
}

void AsyncLLMEngine::flush_notifies() {
  // After every push of the iteration: a reader woken by the first finds all of them queued.
  std::vector<std::function<void()>> notifies = std::exchange(notifies_, {});
  for (const std::function<void()>& notify : notifies) notify();
}

void AsyncLLMEngine::admit(std::vector<Pending>& adds) {
  for (Pending& p : adds) {
    auto a = std::make_unique<Active>();
    a->request_id = p.stream->request_id();
    a->stream = p.stream;
    a->num_prompt_tokens = int(p.prompt.size());
    a->arrival = p.arrival;
    a->logprobs = p.params.logprobs.has_value();
    a->samples.resize(size_t(std::max(1, p.params.n)));
    for (Active::Sample& s : a->samples) {
      if (p.options.detokenize) s.detokenizer.emplace(engine_.require_tokenizer(), p.options.skip_special_tokens);
    }
    try {
      a->seq_id = engine_.add_request(std::move(p.prompt), p.params);
    } catch (const std::exception& e) {  // validated already; kept for safety
      Active& failed = *a;
      active_[a->request_id] = std::move(a);
      count_finished("error", int64_t(failed.samples.size()));
      for (int i = 0, n = int(failed.samples.size()); i < n; ++i) finish(failed, i, "error", e.what());
      continue;
    }
    for (size_t i = 0; i < a->samples.size(); ++i) request_of_seq_[a->seq_id + int64_t(i)] = a->request_id;
    active_[a->request_id] = std::move(a);
  }
}

std::vector<AsyncLLMEngine::AbortOf> AsyncLLMEngine::all_active() const {
  std::vector<AbortOf> all;
  for (const auto& [id, a] : active_) all.push_back({id, -1});
  return all;
}

void AsyncLLMEngine::apply_aborts(const std::vector<AbortOf>& aborts, const std::string& reason,
                                  const std::string& error) {
  std::vector<std::pair<int64_t, int>> ended;  // (request id, sample)
  for (const AbortOf& ab : aborts) {
    auto it = active_.find(ab.request_id);
    if (it == active_.end()) continue;  // finished already
    Active& a = *it->second;
    const int n = int(a.samples.size());
    if (ab.index >= n) continue;
    // The siblings before sample 0: a pending sibling is dropped rather than admitted.
    for (int i = ab.index < 0 ? n - 1 : ab.index; i >= std::max(ab.index, 0); --i) {
      if (a.samples[size_t(i)].ended) continue;
      bool listed = false;
      for (const auto& e : ended) listed |= e.first == a.request_id && e.second == i;
      if (listed) continue;
      engine_.abort(a.seq_id + i);  // frees its blocks; false when it finished (freed too)
      ended.emplace_back(a.request_id, i);
    }
  }
  if (ended.empty()) return;
  // Counted, then the gauges, then the final events: a reader of an event sees the blocks freed,
  // and a /metrics reader that sees them freed sees these samples counted.
  count_finished(reason, int64_t(ended.size()));
  update_gauges();
  // In sample order, so that the stream's final event is its last sample's.
  std::sort(ended.begin(), ended.end());
  for (auto [id, i] : ended) {
    auto it = active_.find(id);
    if (it != active_.end()) finish(*it->second, i, reason, error);
  }
}

void AsyncLLMEngine::finish(Active& a, int index, const std::string& reason, const std::string& error) {
  Active::Sample& s = a.samples[size_t(index)];
  NV_CHECK(!s.ended);
  s.ended = true;
  ++a.num_ended;
  RequestEvent e;
  e.index = index;
  if (s.detokenizer) e.text = s.detokenizer->finish();
  e.finished = a.num_ended == int(a.samples.size());
  e.finish_reason = reason;
  e.error = error;
  e.num_prompt_tokens = a.num_prompt_tokens;
  e.num_completion_tokens = a.num_completion_tokens;
  e.num_sample_tokens = s.num_tokens;
  if (e.finished) {
    std::lock_guard lock(metrics_mu_);
    metrics_.e2e_request_latency_seconds.observe(seconds(Clock::now() - a.arrival));
  }
  request_of_seq_.erase(a.seq_id + index);
  if (!e.finished) {
    a.stream->push(std::move(e), &notifies_);
    return;
  }
  --num_unfinished_;  // before the final event: its reader sees the count without it
  a.stream->push(std::move(e), &notifies_);
  active_.erase(a.request_id);  // destroys a
}

void AsyncLLMEngine::run_step() {
  StepResult r;
  try {
    r = engine_.step();
  } catch (const std::exception& e) {
    // The step failed as a whole: end everything in flight with its message.
    const std::vector<AbortOf> all = all_active();
    {
      std::lock_guard lock(metrics_mu_);
      ++metrics_.num_step_errors;
    }
    apply_aborts(all, "error", fmt::format("engine step failed: {}", e.what()));
    return;
  }
  for (const auto& seq : r.finished)  // counted before the gauges move, as in apply_aborts
    if (request_of_seq_.contains(seq->seq_id))
      count_finished(finish_reason_name(seq->finish_reason), 1);
  update_gauges();
  const auto now = Clock::now();
  std::unordered_map<int64_t, RequestEvent> events;  // by seq id
  std::vector<int64_t> order;                         // seq ids, in the step's order
  int64_t new_prompt_tokens = 0, new_tokens = 0;
  std::vector<double> ttfts, itls;
  std::unordered_map<int64_t, std::vector<StepLogprobs>*> prompt_logprobs;  // by seq id
  for (auto& [seq_id, lps] : r.prompt_logprobs) prompt_logprobs[seq_id] = &lps;
  for (size_t k = 0; k < r.new_tokens.size(); ++k) {
    auto [seq_id, token] = r.new_tokens[k];
    auto rit = request_of_seq_.find(seq_id);
    if (rit == request_of_seq_.end()) continue;  // not ours
    Active& a = *active_.at(rit->second);
    const int index = int(seq_id - a.seq_id);
    Active::Sample& s = a.samples[size_t(index)];
    auto [eit, inserted] = events.try_emplace(seq_id);
    if (inserted) order.push_back(seq_id);
    RequestEvent& e = eit->second;
    e.index = index;
    e.token_ids.push_back(token);
    if (a.logprobs && k < r.new_logprobs.size()) e.logprobs.push_back(r.new_logprobs[k]);
    if (auto pit = prompt_logprobs.find(seq_id); pit != prompt_logprobs.end()) {
      e.prompt_logprobs = std::move(*pit->second);
      prompt_logprobs.erase(pit);
    }
    if (s.detokenizer) e.text += s.detokenizer->add(token);
    if (a.num_completion_tokens == 0) {  // the request's first token: its prompt is computed
      ttfts.push_back(seconds(now - a.arrival));
      new_prompt_tokens += a.num_prompt_tokens;
    } else if (s.num_tokens > 0) {
      itls.push_back(seconds(now - s.last_token));
    }
    s.last_token = now;
    ++s.num_tokens;
    ++a.num_completion_tokens;
    ++new_tokens;
  }
  {
    std::lock_guard lock(metrics_mu_);
    ++metrics_.num_steps;
    metrics_.prompt_tokens_total += new_prompt_tokens;
    metrics_.generation_tokens_total += new_tokens;
    for (double v : ttfts) metrics_.time_to_first_token_seconds.observe(v);
    for (double v : itls) metrics_.inter_token_latency_seconds.observe(v);
  }
  // Token events first, then the ended samples' final events (same order as the step).
  for (int64_t seq_id : order) {
    Active& a = *active_.at(request_of_seq_.at(seq_id));
    RequestEvent& e = events[seq_id];
    e.num_prompt_tokens = a.num_prompt_tokens;
    e.num_completion_tokens = a.num_completion_tokens;
    e.num_sample_tokens = a.samples[size_t(e.index)].num_tokens;
    a.stream->push(std::move(e), &notifies_);
  }
  for (const auto& seq : r.finished) {
    auto rit = request_of_seq_.find(seq->seq_id);
    if (rit == request_of_seq_.end()) continue;
    Active& a = *active_.at(rit->second);
    finish(a, int(seq->seq_id - a.seq_id), finish_reason_name(seq->finish_reason), seq->error);
  }
  StepInfo info{int(r.finished.size()), r.num_prefill_tokens, r.num_decode_tokens};
  std::function<void(const StepInfo&)> observer;
  {
    std::lock_guard lock(metrics_mu_);
    observer = step_observer_;
  }
  if (observer) observer(info);
}

void AsyncLLMEngine::count_finished(const std::string& reason, int64_t samples) {
  std::lock_guard lock(metrics_mu_);
  metrics_.request_success_total[reason] += samples;  // per sample
}

void AsyncLLMEngine::update_gauges() {
  const Scheduler& s = engine_.scheduler();
  const BlockManager& bm = s.block_manager();
  int waiting_inbox;
  {
    std::lock_guard lock(mu_);
    waiting_inbox = int(pending_adds_.size());
  }
  std::lock_guard lock(metrics_mu_);
  metrics_.num_requests_running = int(s.num_running());
  metrics_.num_requests_waiting = int(s.num_waiting()) + waiting_inbox;
  metrics_.num_kv_blocks = bm.num_blocks();
  metrics_.num_free_kv_blocks = bm.num_free_blocks();
  metrics_.kv_cache_usage_perc =
      bm.num_blocks() ? 1.0 - double(bm.num_free_blocks()) / bm.num_blocks() : 0.0;
  metrics_.num_preemptions = s.num_preemptions();
  metrics_.prefix_cache_queries = bm.num_prefix_queries();
  metrics_.prefix_cache_hits = bm.num_prefix_hits();
}

}  // namespace nanovllm
