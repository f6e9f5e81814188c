#pragma once
// Logprobs returned per generated token (SamplingParams::logprobs).
#include <cstdint>
#include <vector>

namespace nanovllm {

struct Logprob {
  int32_t token_id = 0;
  float logprob = 0.0f;  // natural log; -inf for a token the model gives no probability
};

// One generated token: its logprob and rank under the raw log-softmax of the model's logits
// (before penalties, bias, temperature and truncation: vLLM's default), and the `logprobs` most
// likely tokens (logprob descending, then token id ascending).
struct StepLogprobs {
  Logprob sampled;
  int rank = 0;             // 1 + the number of tokens with a strictly larger logprob
  std::vector<Logprob> top;
};

}  // namespace nanovllm
