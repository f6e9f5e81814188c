#pragma once
// LLMEngine: requests in, one step at a time (nano-vllm's engine/llm_engine.py):
// step() = schedule -> run -> postprocess.
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "model/hf_config.h"
#include "nanovllm/config.h"
#include "nanovllm/sampling_params.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm {

struct StepResult {
  std::vector<std::unique_ptr<Sequence>> finished;  // ended this step (errors included)
  std::vector<std::pair<int64_t, int32_t>> new_tokens;  // (seq_id, token) appended this step
  int num_prefill_tokens = 0;  // tokens computed by a prefill step
  int num_decode_tokens = 0;   // sequences advanced by a decode step
};

class LLMEngine {
 public:
  explicit LLMEngine(const Config& config);  // throws Error for a bad model folder or config
  ~LLMEngine();

  // Validates and queues a request; returns its id. Throws Error naming what was wrong (empty
  // prompt, token id out of range, prompt too long for max_model_len, max_tokens < 1, bad
  // temperature / top_k / top_p); the engine and its other requests are unaffected.
  int64_t add_request(std::vector<int32_t> prompt, const SamplingParams& params);
  void validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  StepResult step();
  // Ends a waiting or running request between steps and frees its KV blocks; false when it is
  // not waiting or running (finished already, or unknown).
  bool abort(int64_t seq_id);
  bool is_finished() const { return scheduler_->is_finished(); }

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
  ResolvedSampling resolve(const SamplingParams& params, int64_t seq_id) const;

  Config config_;
  ModelConfig model_config_;
  GenerationConfig generation_config_;
  std::vector<int> eos_token_ids_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelRunner> model_runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::optional<Tokenizer> tokenizer_;
  mutable std::optional<ChatTemplate> chat_template_;
  int64_t next_seq_id_ = 0;
};

const char* finish_reason_name(FinishReason r);

}  // namespace nanovllm
