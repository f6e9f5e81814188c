#pragma once
#include <cstdint>
#include <optional>

namespace nanovllm {

// Per-request sampling. Unset fields take the model's generation_config.json defaults (then the
// values below). LLMEngine::add_request rejects invalid values with nanovllm::Error.
struct SamplingParams {
  std::optional<float> temperature;  // 0 = greedy; must be >= 0 and finite (default 1.0)
  std::optional<int> top_k;          // <= 0: off (default off)
  std::optional<float> top_p;        // (0, 1]; 1: off (default 1)
  int max_tokens = 64;               // >= 1: tokens to generate at most
  bool ignore_eos = false;           // keep going past eos ids
  std::optional<uint64_t> seed;      // per-request RNG seed (default: from the request id)
};

}  // namespace nanovllm
