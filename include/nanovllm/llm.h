#pragma once
// The public API: LLM::generate (token ids or text) and LLM::chat, as nano-vllm's LLM.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/config.h"
#include "nanovllm/logprobs.h"
#include "nanovllm/sampling_params.h"

namespace nanovllm {

class LLMEngine;

struct GenerationOutput {
  std::vector<int32_t> token_ids;  // completion tokens only (an eos or stop token that stopped
                                   // it included; with a stop string, up to the token that
                                   // completed it)
  std::string finish_reason;       // "stop" (eos, stop_token_ids, a stop string), "length"
                                   // (max_tokens / max_model_len), "error"
  std::string error;               // the reason, when finish_reason == "error"
  std::string text;                // the completion decoded (SamplingParams::skip_special_tokens)
                                   // when the model folder has a tokenizer, else empty; ends
                                   // before a matched stop string (after it with
                                   // include_stop_str_in_output)
  std::string stop_reason;         // the stop string that ended it, if one did
  std::vector<StepLogprobs> logprobs;  // one per token of token_ids when SamplingParams::logprobs
                                       // is set, else empty
  // SamplingParams::prompt_logprobs: one per prompt token after the first (entry i is prompt
  // token i + 1 given tokens 0..i; vLLM's list without its leading None), else empty.
  std::vector<StepLogprobs> prompt_logprobs;
  // n > 1: all n samples, in order (samples[0] repeats the fields above); empty when n == 1.
  std::vector<GenerationOutput> samples;
};

// Called as text is produced: prompt index, newly completed text (never part of a UTF-8
// character, never part of a stop string). Concatenated per index, it equals
// GenerationOutput::text (of sample 0 when n > 1: only sample 0 streams).
using StreamCallback = std::function<void(size_t index, const std::string& delta)>;

// Where a generate call stands: samples finished of num_total, and what the engine's steps did
// since the call began (tokens, and wall seconds of prefill and of decode steps).
struct GenerateProgress {
  int num_finished = 0;
  int num_total = 0;
  int64_t num_steps = 0;
  int64_t num_decode_steps = 0;  // steps without prompt tokens (the others count as prefill)
  int64_t num_prefill_tokens = 0, num_decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};
// Called on generate's calling thread after engine steps and at least every 100 ms while it runs
// (the Python package draws its progress bar and checks for Ctrl-C there), and once more before
// generate returns, with every step of the call counted. It may throw: the call's unfinished
// requests are then aborted and generate rethrows the exception.
using ProgressCallback = std::function<void(const GenerateProgress&)>;

struct ChatOptions {
  nlohmann::ordered_json tools = nullptr;     // null or an array of tool definitions
  bool add_generation_prompt = true;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // e.g. enable_thinking
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
                                         const std::vector<SamplingParams>& params,
                                         const StreamCallback& on_text = nullptr,
                                         const ProgressCallback& on_progress = nullptr);
  // Text prompts, encoded with the model's tokenizer (special-token text is parsed).
  std::vector<GenerationOutput> generate(const std::vector<std::string>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         const StreamCallback& on_text = nullptr,
                                         const ProgressCallback& on_progress = nullptr);
  // The model's chat template applied to messages ([{"role": ..., "content": ...}, ...]).
  std::string apply_chat_template(const nlohmann::ordered_json& messages,
                                  const ChatOptions& options = {}) const;
  // One conversation: apply_chat_template, then generate.
  GenerationOutput chat(const nlohmann::ordered_json& messages, const SamplingParams& params,
                        const ChatOptions& options = {}, const StreamCallback& on_text = nullptr);

  LLMEngine& engine() { return *engine_; }

 private:
  std::unique_ptr<LLMEngine> engine_;
  bool show_progress_;
};

}  // namespace nanovllm
