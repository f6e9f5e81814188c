#pragma once
// AsyncLLMEngine: an LLMEngine driven by its own thread (vLLM's AsyncLLMEngine).
//
// add_request() validates on the caller's thread (an invalid request throws nanovllm::Error and
// nothing is queued) and returns a RequestStream whose events carry new token ids, the text they
// completed (incremental detokenizer), logprobs when asked, usage, and at the end the finish
// reason. Any thread may call abort(); the engine thread ends the request and frees its KV blocks
// at the next step boundary, and its stream ends with finish_reason "abort".
//
// SamplingParams::n > 1: one request, one stream, n samples (LLMEngine's sequences id .. id+n-1;
// sample 0 runs first and the others once it has computed its prompt, so they share its prompt's
// KV blocks through the prefix cache). Sample i's seed is sample_seed(seed, i) as LLMEngine
// derives it, so with an explicit seed sample i equals a lone n == 1 request with that seed.
// Events name their sample (RequestEvent::index); usage counts the prompt once and the tokens of
// all samples; abort() ends every sample (those not scheduled yet included), abort_sample() one;
// the stream ends (RequestEvent::finished) once all n samples have ended.
//
// The engine thread sleeps while none of its requests is unfinished, and touches the LLMEngine
// only while one is: callers may use the LLMEngine directly (LLMEngine is not thread-safe) only
// while no request of this object is in flight. A step that throws ends every request in flight
// with finish_reason "error" and the exception's message; the engine keeps serving new requests.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_metrics.h"
#include "engine/llm_engine.h"
#include "engine/request_stream.h"

namespace nanovllm {

struct RequestOptions {
  bool detokenize = true;            // fill RequestEvent::text (needs the model's tokenizer)
  bool skip_special_tokens = true;
};

// What one engine step did, for observers (progress bars, benchmarks).
struct StepInfo {
  int num_finished = 0;
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
};

class AsyncLLMEngine {
 public:
  explicit AsyncLLMEngine(LLMEngine& engine);
  ~AsyncLLMEngine();  // aborts what is in flight and joins the engine thread
  AsyncLLMEngine(const AsyncLLMEngine&) = delete;
  AsyncLLMEngine& operator=(const AsyncLLMEngine&) = delete;

  // Throws Error for an invalid request (the engine and its other requests are unaffected).
  std::shared_ptr<RequestStream> add_request(std::vector<int32_t> prompt, const SamplingParams& params,
                                             const RequestOptions& options = {});
  // Several requests handed to the engine together (in order, one step boundary). Validates all
  // first: an invalid one throws "request i: ..." and none is queued.
  std::vector<std::shared_ptr<RequestStream>> add_requests(
      std::vector<std::vector<int32_t>> prompts, const std::vector<SamplingParams>& params,
      const RequestOptions& options = {});
  // The same with options per request (1, or one per prompt).
  std::vector<std::shared_ptr<RequestStream>> add_requests(
      std::vector<std::vector<int32_t>> prompts, const std::vector<SamplingParams>& params,
      const std::vector<RequestOptions>& options);
  // Ends the request (all its samples) at the next step boundary (no-op when it already finished).
  void abort(int64_t request_id);
  // Ends sample `index` of the request only (e.g. a stop string matched in it); its final event
  // has finish_reason "abort". No-op when that sample already ended.
  void abort_sample(int64_t request_id, int index);

  // Called on the engine thread after every step (must be quick).
  void set_step_observer(std::function<void(const StepInfo&)> observer);
  // A consistent copy of the metrics.
  EngineMetrics metrics() const;
  // Requests added and not finished yet.
  int num_unfinished() const { return num_unfinished_.load(); }
  // Stops taking requests' steps: aborts all in flight and joins the thread. Idempotent.
  void shutdown();

  const LLMEngine& engine() const { return engine_; }

 private:
  struct Pending {
    std::vector<int32_t> prompt;
    SamplingParams params;
    RequestOptions options;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point arrival;
  };
  struct Active;
  struct AbortOf {
    int64_t request_id;
    int index;  // the sample; -1: all of them
  };

  void loop();
  void admit(std::vector<Pending>& adds);
  void apply_aborts(const std::vector<AbortOf>& aborts, const std::string& reason,
                    const std::string& error);
  std::vector<AbortOf> all_active() const;
  void run_step();
  // Sample `index` of `a` ended; the last one to end ends the request (and destroys `a`). The
  // caller has counted it (count_finished) before moving the gauges.
  void finish(Active& a, int index, const std::string& reason, const std::string& error);
  // Runs the readers' notifies deferred by this iteration's pushes (RequestStream::push).
  void flush_notifies();
  void count_finished(const std::string& reason, int64_t samples);
  void update_gauges();

  LLMEngine& engine_;
  std::atomic<int64_t> next_request_id_{0};
  std::atomic<int> num_unfinished_{0};

  mutable std::mutex mu_;  // guards the inbox and stop_
  std::condition_variable cv_;
  std::vector<Pending> pending_adds_;
  std::vector<AbortOf> pending_aborts_;
  bool stop_ = false;

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;
  std::function<void(const StepInfo&)> step_observer_;

  // Engine thread only.
  std::unordered_map<int64_t, std::unique_ptr<Active>> active_;  // by request id
  std::unordered_map<int64_t, int64_t> request_of_seq_;            // seq id -> request id
  std::vector<std::function<void()>> notifies_;  // deferred by this iteration's pushes
  std::thread thread_;
};

}  // namespace nanovllm
