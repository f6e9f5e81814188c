#include "nanovllm/llm.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "engine/async_llm_engine.h"
#include "engine/llm_engine.h"
#include "engine/stop_checker.h"
#include "runtime/sampling_rng.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_detokenizer.h"
#include "util/progress_bar.h"

namespace nanovllm {

LLM::LLM(const Config& config)
    : engine_(std::make_unique<LLMEngine>(config)), show_progress_(config.show_progress) {}

LLM::~LLM() = default;

namespace {

// One sample of one prompt (SamplingParams::n) in flight on the AsyncLLMEngine.
struct Job {
  size_t prompt = 0;
  int sample = 0;
  SamplingParams params;  // n = 1, this sample's seed
  std::shared_ptr<RequestStream> stream;  // null until submitted
  std::optional<StopChecker> stop;
  std::optional<IncrementalDetokenizer> detokenizer;  // with stop strings: text token by token
  int num_tokens = 0;
  bool stopped = false;  // a stop string matched: the request was aborted
  bool done = false;
  GenerationOutput out;
};

}  // namespace

// n > 1 runs as n requests of one sample each: sample 0 first, the others once sample 0 has
// produced a token (its prompt's full blocks are then in the prefix cache, so the siblings share
// them). Sample i > 0 of a seeded request uses sample_seed(seed, i) (runtime/sampling_rng.h), so
// sample 0 equals the n == 1 output. Stop strings: a StopChecker per sample over the streamed
// text; a match aborts the request and the output ends with finish_reason "stop".
std::vector<GenerationOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<SamplingParams>& params,
                                            const StreamCallback& on_text,
                                            const ProgressCallback& on_progress) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    fail("generate: {} sampling params for {} prompts (give 1 or one per prompt)", params.size(),
         prompts.size());
  }
  auto param = [&](size_t i) -> const SamplingParams& { return params[params.size() == 1 ? 0 : i]; };
  const Tokenizer* tokenizer = engine_->tokenizer();
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      engine_->validate(prompts[i], param(i));
      if (!param(i).stop.empty() && !tokenizer) {
        fail("stop strings need the model's tokenizer.json (the folder has none)");
      }
    } catch (const Error& e) {
      fail("prompt {}: {}", i, e.what());
    }
  }
  // A grammar that does not compile is an Error naming its keyword, as add_request gives it (the
  // compiled grammars are cached: the add below finds them).
  for (size_t i = 0; i < prompts.size(); ++i) engine_->compile_structured(param(i));
  // Built on the streaming API: one engine thread for this call, one stream per sample.
  std::vector<std::unique_ptr<Job>> jobs;
  std::vector<size_t> first_job(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    first_job[i] = jobs.size();
    for (int k = 0; k < param(i).n; ++k) {
      auto job = std::make_unique<Job>();
      job->prompt = i;
      job->sample = k;
      job->params = param(i);
      job->params.n = 1;
      if (k > 0 && job->params.seed) job->params.seed = sample_seed(*job->params.seed, k);
      if (k > 0) job->params.prompt_logprobs.reset();  // sample 0 reports the prompt's
      if (!job->params.stop.empty()) {
        job->stop.emplace(job->params.stop, job->params.include_stop_str_in_output);
        job->detokenizer.emplace(*tokenizer, job->params.skip_special_tokens);
      }
      jobs.push_back(std::move(job));
    }
  }
  ProgressBar bar(int(jobs.size()), "Generating", show_progress_);
  std::mutex progress_mu;  // guards progress and last_step (written by the engine thread)
  GenerateProgress progress;
  auto last_step = std::chrono::steady_clock::now();
  {
    AsyncLLMEngine async(*engine_);
    async.set_step_observer([&](const StepInfo& s) {
      bar.update(s.num_finished, s.num_prefill_tokens, s.num_decode_tokens);
      std::lock_guard lock(progress_mu);
      auto now = std::chrono::steady_clock::now();
      double dt = std::chrono::duration<double>(now - last_step).count();
      last_step = now;
      ++progress.num_steps;
      progress.num_prefill_tokens += s.num_prefill_tokens;
      progress.num_decode_tokens += s.num_decode_tokens;
      (s.num_prefill_tokens > 0 ? progress.prefill_seconds : progress.decode_seconds) += dt;
      if (s.num_prefill_tokens == 0 && s.num_decode_tokens > 0) ++progress.num_decode_steps;
    });
    // The streams' notify: one wake-up however many streams turn non-empty before this thread
    // looks (a step ends with all its streams' notifies in a row), and a lambda small enough for
    // std::function to hold without allocating (the engine copies it per push).
    struct Waker {
      std::mutex mu;
      std::condition_variable cv;
      std::atomic<bool> woken{false};
      void wake() {
        if (woken.exchange(true)) return;  // set already: this thread has yet to clear it
        std::lock_guard lock(mu);          // not between the waiter's check and its sleep
        cv.notify_one();
      }
    } waker;
    // Joins the engine thread before the waker goes, also when a callback throws.
    struct JoinFirst {
      AsyncLLMEngine& async;
      ~JoinFirst() { async.shutdown(); }
    } join_first{async};
    auto options_of = [&](const Job& job) {
      RequestOptions options;
      options.detokenize = tokenizer != nullptr && !job.stop;  // stop strings: our own
      options.skip_special_tokens = job.params.skip_special_tokens;
      return options;
    };
    auto listen = [&](Job& job) { job.stream->set_notify([w = &waker] { w->wake(); }); };
    auto submit = [&](Job& job) {
      job.stream = async.add_request(prompts[job.prompt], job.params, options_of(job));
      listen(job);
    };
    // Every prompt's first sample in one add: the engine's first step sees them all, as
    // nano-vllm's generate adds them all before stepping. (Added one by one, the engine thread
    // could start on the first few, and which rows share a step would depend on timing: outputs
    // then hold only as far as every kernel is batch invariant, which the CUDA backend's GEMV /
    // cuBLASLt split by rows is not bit for bit.)
    {
      std::vector<std::vector<int32_t>> first_prompts;
      std::vector<SamplingParams> first_params;
      std::vector<RequestOptions> first_options;
      for (size_t i = 0; i < prompts.size(); ++i) {
        const Job& job = *jobs[first_job[i]];
        first_prompts.push_back(prompts[i]);
        first_params.push_back(job.params);
        first_options.push_back(options_of(job));
      }
      std::vector<std::shared_ptr<RequestStream>> streams =
          async.add_requests(std::move(first_prompts), first_params, first_options);
      for (size_t i = 0; i < prompts.size(); ++i) {
        jobs[first_job[i]]->stream = std::move(streams[i]);
        listen(*jobs[first_job[i]]);
      }
    }
    auto handle = [&](Job& job, const RequestEvent& e) {
      GenerationOutput& out = job.out;
      if (!e.prompt_logprobs.empty()) out.prompt_logprobs = e.prompt_logprobs;
      if (!job.stopped) {
        std::string shown;
        if (!job.stop) {
          out.token_ids.insert(out.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
          out.logprobs.insert(out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
          job.num_tokens += int(e.token_ids.size());
          shown = e.text;
        } else {
          // Token by token, so that the output ends with the token that completed the match.
          for (size_t t = 0; t < e.token_ids.size() && !job.stop->stopped(); ++t) {
            out.token_ids.push_back(e.token_ids[t]);
            if (t < e.logprobs.size()) out.logprobs.push_back(e.logprobs[t]);
            ++job.num_tokens;
            shown += job.stop->add(job.detokenizer->add(e.token_ids[t]),
                                   job.num_tokens >= job.params.min_tokens);
          }
          if (e.finished && !job.stop->stopped()) {
            shown += job.stop->add(job.detokenizer->finish(), job.num_tokens >= job.params.min_tokens);
            shown += job.stop->finish();
          }
        }
        out.text += shown;
        if (on_text && job.sample == 0 && !shown.empty()) on_text(job.prompt, shown);
        if (job.stop && job.stop->stopped()) {
          job.stopped = true;
          out.finish_reason = "stop";
          out.stop_reason = job.stop->matched();
          if (!e.finished) async.abort(job.stream->request_id());
        }
      }
      if (e.finished) {
        if (!job.stopped) {
          out.finish_reason = e.finish_reason;
          out.error = e.error;
        }
        job.done = true;
      }
    };
    size_t remaining = jobs.size();
    while (remaining > 0) {
      bool any = false;
      for (auto& job : jobs) {
        if (job->done || !job->stream) continue;
        while (std::optional<RequestEvent> e = job->stream->try_next()) {
          any = true;
          handle(*job, *e);
          if (job->done) {
            --remaining;
            break;
          }
        }
      }
      // Siblings once sample 0 has its prompt computed (or ended).
      for (size_t i = 0; i < prompts.size(); ++i) {
        const Job& first = *jobs[first_job[i]];
        if (first.num_tokens == 0 && !first.done) continue;
        for (int k = 1; k < param(i).n; ++k) {
          Job& sib = *jobs[first_job[i] + size_t(k)];
          if (!sib.stream) {
            submit(sib);
            any = true;
          }
        }
      }
      if (on_progress) {
        GenerateProgress p;
        {
          std::lock_guard lock(progress_mu);
          p = progress;
        }
        p.num_finished = int(jobs.size() - remaining);
        p.num_total = int(jobs.size());
        on_progress(p);
      }
      if (!any && remaining > 0) {
        std::unique_lock lock(waker.mu);
        waker.cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return waker.woken.load(); });
        waker.woken = false;
      }
    }
    async.shutdown();  // the observer runs on the engine thread: join it before closing the bar
  }
  bar.close();
  // The engine thread observes a step after pushing its events, so the loop above can end
  // before the last step is counted: one more call once the thread is joined gives every step.
  if (on_progress) {
    progress.num_finished = progress.num_total = int(jobs.size());
    on_progress(progress);
  }
  std::vector<GenerationOutput> outputs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    outputs[i] = jobs[first_job[i]]->out;
    if (param(i).n > 1) {
      for (int k = 0; k < param(i).n; ++k) outputs[i].samples.push_back(jobs[first_job[i] + size_t(k)]->out);
    }
  }
  return outputs;
}

std::vector<GenerationOutput> LLM::generate(const std::vector<std::string>& prompts,
                                            const std::vector<SamplingParams>& params,
                                            const StreamCallback& on_text,
                                            const ProgressCallback& on_progress) {
  const Tokenizer& tokenizer = engine_->require_tokenizer();
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  // As nano-vllm's tokenizer.encode(prompt): the post-processor's BOS (Llama) included.
  for (const std::string& p : prompts) ids.push_back(tokenizer.encode_with_special_tokens(p));
  return generate(ids, params, on_text, on_progress);
}

std::string LLM::apply_chat_template(const nlohmann::ordered_json& messages,
                                     const ChatOptions& options) const {
  if (!messages.is_array() || messages.empty()) fail("chat: messages must be a non-empty array");
  return engine_->chat_template().render(messages, options.tools, options.add_generation_prompt,
                                         options.template_kwargs);
}

GenerationOutput LLM::chat(const nlohmann::ordered_json& messages, const SamplingParams& params,
                           const ChatOptions& options, const StreamCallback& on_text) {
  return generate(std::vector<std::string>{apply_chat_template(messages, options)}, {params},
                  on_text)[0];
}

}  // namespace nanovllm
