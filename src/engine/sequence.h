#pragma once
// Sequence: one request's tokens and scheduling state (nano-vllm's engine/sequence.py).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nanovllm/logprobs.h"
#include "nanovllm/sampling_params.h"
#include "structured/grammar_matcher.h"

namespace nanovllm {

enum class SequenceStatus { WAITING, RUNNING, FINISHED };
enum class FinishReason { NONE, STOP, LENGTH, ERROR };

// Sampling fields resolved against generation_config defaults.
struct ResolvedSampling {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  int max_tokens = 64;
  bool ignore_eos = false;
  uint64_t seed = 0;              // this sample's seed (runtime/sampling_rng.h sample_seed)
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // sorted by id, biases in [-100, 100]
  int min_tokens = 0;
  std::vector<int32_t> stop_token_ids;   // finish with STOP (once min_tokens are generated)
  std::vector<int32_t> min_tokens_mask;  // masked while fewer than min_tokens were generated:
                                         // eos (unless ignore_eos) and stop_token_ids, sorted
  int logprobs = -1;                     // -1: none; else top logprobs per token (0..20)
  std::optional<int> prompt_logprobs;    // top logprobs per prompt token (-1: the whole vocab)
  int n = 1;                             // samples of the request
  int sample_index = 0;                  // which of them this sequence is
};

class Sequence {
 public:
  Sequence(int64_t seq_id, std::vector<int32_t> prompt, const ResolvedSampling& sampling,
           int block_size);

  int64_t seq_id;
  SequenceStatus status = SequenceStatus::WAITING;
  FinishReason finish_reason = FinishReason::NONE;
  std::string error;                 // why, when finish_reason == ERROR
  std::vector<int32_t> token_ids;    // prompt then completion
  int32_t last_token;
  int num_prompt_tokens;
  int num_cached_tokens = 0;         // leading tokens whose KV is in the cache
  int num_scheduled_tokens = 0;      // tokens this step computes (prefill chunk; 1 for decode)
  std::vector<int32_t> block_table;  // block ids, in order
  ResolvedSampling sampling;
  int block_size;
  int64_t request_id;                // the seq_id of sample 0 (== seq_id when n == 1)
  // SamplingParams::prompt_logprobs: entry i is prompt token i + 1's, filled as prefill computes
  // the rows (num_prompt_tokens - 1 entries once the prompt is done).
  std::vector<StepLogprobs> prompt_logprobs;
  bool prompt_logprobs_reported = false;
  // SamplingParams::structured_outputs: the grammar's state over the tokens generated so far
  // (each sample of a request has its own); nullptr when unconstrained.
  std::unique_ptr<structured::GrammarMatcher> grammar;
  std::string grammar_error;  // the matcher's Error this step (a limit it hit); postprocess ends the seq

  int num_tokens() const { return int(token_ids.size()); }
  int num_completion_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool is_finished() const { return status == SequenceStatus::FINISHED; }
  int num_cached_blocks() const { return num_cached_tokens / block_size; }
  int num_blocks() const { return (num_tokens() + block_size - 1) / block_size; }
  int last_block_num_tokens() const { return num_tokens() - (num_blocks() - 1) * block_size; }
  // Prompt logprobs still to compute: rows from position prompt_logprobs.size() on.
  bool needs_prompt_logprobs() const {
    return sampling.prompt_logprobs && !prompt_logprobs_reported &&
           int(prompt_logprobs.size()) < num_prompt_tokens - 1;
  }
  // Token ids of block i (the last block may be partial).
  std::vector<int32_t> block(int i) const;
  void append_token(int32_t token_id);
};

}  // namespace nanovllm
