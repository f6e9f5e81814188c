#pragma once
// The public API: LLM::generate, as nano-vllm's LLM.generate.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nanovllm/config.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm {

class LLMEngine;

struct GenerationOutput {
  std::vector<int32_t> token_ids;  // completion tokens only
  std::string finish_reason;       // "stop" (eos), "length" (max_tokens / max_model_len), "error"
  std::string error;               // the reason, when finish_reason == "error"
  std::string text;                // detokenized completion (when the model has a tokenizer)
};

class LLM {
 public:
  explicit LLM(const Config& config);  // throws nanovllm::Error for a bad model folder or config
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // One output per prompt, in order. params holds one entry for all prompts or one per prompt.
  // Throws nanovllm::Error for an invalid request (nothing is run then).
  std::vector<GenerationOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<SamplingParams>& params);

  LLMEngine& engine() { return *engine_; }

 private:
  std::unique_ptr<LLMEngine> engine_;
  bool show_progress_;
};

}  // namespace nanovllm
