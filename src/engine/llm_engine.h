#pragma once
// LLMEngine: requests in, one step at a time (nano-vllm's engine/llm_engine.py):
// step() = schedule -> run -> postprocess.
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/tp_group.h"
#include "engine/sequence.h"
#include "model/hf_config.h"
#include "nanovllm/config.h"
#include "nanovllm/logprobs.h"
#include "nanovllm/sampling_params.h"
#include "structured/grammar_cache.h"
#include "structured/token_vocabulary.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm {

struct StepResult {
  std::vector<std::unique_ptr<Sequence>> finished;  // ended this step (errors included)
  std::vector<std::pair<int64_t, int32_t>> new_tokens;  // (seq_id, token) appended this step
  // Empty when no sequence of the step asked for logprobs; else one per new_tokens entry (empty
  // StepLogprobs for a sequence that did not ask).
  std::vector<StepLogprobs> new_logprobs;
  // SamplingParams::prompt_logprobs of the sequences whose prompt was completed this step (with
  // their first token): (seq_id, one per prompt token after the first).
  std::vector<std::pair<int64_t, std::vector<StepLogprobs>>> prompt_logprobs;
  int num_prefill_tokens = 0;  // tokens computed by a prefill step
  int num_decode_tokens = 0;   // sequences advanced by a decode step
};

// Where the host's time went, summed over steps (LLMEngine::step_times): the scheduler, the
// model runner's host-side preparation (inputs built and copied), its execution (forward launched
// or run, sampling, the sampled ids back: on a GPU, mostly waiting for the device) and the
// postprocessing (tokens appended, stops, logprobs, siblings).
struct StepTimes {
  int64_t steps = 0;
  double schedule_s = 0, prepare_s = 0, execute_s = 0, postprocess_s = 0;
};

class LLMEngine {
 public:
  static constexpr int kMaxSamples = 1024;  // SamplingParams::n
  static constexpr int kMaxLogprobs = 20;   // SamplingParams::logprobs (vLLM's max_logprobs)
  explicit LLMEngine(const Config& config);  // throws Error for a bad model folder or config
  // With tensor_parallel_size > 1 (or distributed_backend "mpi") this object is rank 0 of a
  // tensor-parallel group (engine/tp_group.h); under mpirun, on the other ranks this constructor
  // serves rank 0 and then ends the process.
  // The same on a given backend (tests wrap one to inject faults or fake graphs).
  LLMEngine(const Config& config, std::unique_ptr<Backend> backend,
            const RunnerOptions& runner_options = {});
  ~LLMEngine();

  // Validates and queues a request; returns its id. Throws Error naming what was wrong (empty
  // prompt, token id out of range, prompt too long for max_model_len, any SamplingParams field
  // out of range); the engine and its other requests are unaffected.
  // n > 1: the samples are sequences id, id + 1, ..., id + n - 1 (Sequence::request_id == id).
  // Sample 0 is scheduled at once; the others once it has computed its prompt (its first token),
  // so that they find its full prompt blocks in the prefix cache and share them (with
  // enable_prefix_caching off they compute the prompt themselves).
  int64_t add_request(std::vector<int32_t> prompt, const SamplingParams& params);
  void validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  // params.structured_outputs compiled (cached by its text: add_request compiles it again for
  // free), or nullptr when unset. Error naming the keyword or rule the grammar engine refused, or
  // the field set wrongly. Thread-safe (AsyncLLMEngine calls it on the caller's thread, so a bad
  // schema is refused before the request is queued).
  std::shared_ptr<const structured::CompiledGrammar> compile_structured(const SamplingParams& params);
  // One step: schedule, run, postprocess. A step whose run (or postprocess) throws ends the
  // sequences it ran with FinishReason::ERROR and the exception's message (in StepResult::finished)
  // and leaves the rest of the engine as before: their blocks are freed, no prefix-cache hash is
  // published for KV the step did not compute, and the other requests go on unaffected.
  StepResult step();
  const StepTimes& step_times() const { return step_times_; }
  // Ends a waiting or running request between steps and frees its KV blocks; false when it is
  // not waiting or running (finished already, or unknown).
  bool abort(int64_t seq_id);
  bool is_finished() const { return scheduler_->is_finished() && pending_siblings_.empty(); }

  const Config& config() const { return config_; }
  const ModelConfig& model_config() const { return model_config_; }
  const GenerationConfig& generation_config() const { return generation_config_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  Backend& backend() { return *backend_; }
  // The model folder's tokenizer.json, or nullptr when it has none.
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const Tokenizer& require_tokenizer() const;  // Error when the folder has no tokenizer.json
  // tokenizer_config.json's chat_template (loaded on first use). Error when there is none.
  const ChatTemplate& chat_template() const;
  ModelRunner& model_runner() { return *model_runner_; }

 private:
  // llm_engine_sampling.cpp
  ResolvedSampling resolve(const SamplingParams& params, int64_t request_id) const;
  static uint64_t draw_base_seed();  // std::random_device
  void admit_siblings(int64_t request_id);
  bool abort_pending_sibling(int64_t seq_id);
  // After a step's postprocess: its logprobs, and the siblings it made ready.
  void after_step(const std::vector<Sequence*>& seqs, StepResult& result);

  Config config_;
  StepTimes step_times_;
  int64_t profile_first_step_ = -1, profile_last_step_ = -1;  // NANOVLLM_PROFILE_STEPS
  ModelConfig model_config_;
  GenerationConfig generation_config_;
  std::vector<int> eos_token_ids_;
  // Tensor parallel: the other ranks (destroyed after the runner and backend of rank 0).
  std::unique_ptr<TpGroup> tp_group_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelRunner> model_runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::optional<Tokenizer> tokenizer_;
  mutable std::optional<ChatTemplate> chat_template_;
  int64_t next_seq_id_ = 0;
  // Unseeded requests draw from this, so runs differ; an explicit seed repeats.
  uint64_t base_seed_ = draw_base_seed();
  // Structured outputs: compiled grammars by their text, and the vocabulary their masks range
  // over (built from the tokenizer on the first constrained request).
  structured::GrammarCache grammar_cache_;
  std::once_flag grammar_vocab_once_;
  std::shared_ptr<const structured::TokenVocabulary> grammar_vocab_;
  // Samples 1..n-1 of a request, by the request id, until sample 0 has its prompt computed.
  std::vector<std::pair<int64_t, std::vector<std::unique_ptr<Sequence>>>> pending_siblings_;
};

const char* finish_reason_name(FinishReason r);

}  // namespace nanovllm
