#pragma once
// The reference of the sampling rule (runtime/sampling_rng.h), written from the rule's text with
// plain loops and full sorts, from the request's own lists (prompt, output, logit_bias, masked
// ids) rather than the engine's TokenAdjust tables.
#include <cstdint>
#include <map>
#include <vector>

#include "nanovllm/logprobs.h"

namespace nanovllm::ref {

struct SamplingCase {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::map<int32_t, float> logit_bias;  // clamped to [-100, 100] here
  std::vector<int32_t> prompt;          // the repetition penalty's context, with output
  std::vector<int32_t> output;          // generated so far: counts for frequency / presence
  std::vector<int32_t> masked;          // ids forced to -inf (min_tokens not reached)
  uint64_t seed = 0;
  int64_t offset = 0;
};

// The processed logits y (step 1 of the rule).  logits: [vocab]
std::vector<float> process_logits(const std::vector<float>& logits, const SamplingCase& c);
// The token the rule picks.  logits: [vocab]
int32_t sample(const std::vector<float>& logits, const SamplingCase& c);
// Raw log-softmax logprobs (runtime/logprobs.h's rule) by a full sort.
StepLogprobs logprobs(const std::vector<float>& logits, int32_t token, int num_top);

}  // namespace nanovllm::ref
