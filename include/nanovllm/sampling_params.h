#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nanovllm {

// Structured outputs (vLLM's StructuredOutputsParams): the output is constrained token by token
// to a language; set exactly one field. Tokens the grammar refuses are masked before every other
// step of sampling, and EOS is allowed only where the output is complete. A schema, regex or
// grammar the engine cannot compile is an Error naming the keyword or rule (add_request).
struct StructuredOutputsParams {
  std::optional<std::string> json;                 // a JSON schema (its text)
  bool json_object = false;                        // any JSON object
  std::optional<std::string> regex;                // the whole output matches it
  std::optional<std::vector<std::string>> choice;  // the output is one of these strings
  std::optional<std::string> grammar;              // a GBNF grammar (llama.cpp's), rule `root`
};

// Per-request sampling, vLLM's SamplingParams. Fields left unset (std::optional) take the model's
// generation_config.json defaults, then the values given below. LLMEngine::validate (called by
// add_request) rejects out-of-range values with a nanovllm::Error whose message names the field,
// e.g. "presence_penalty must be in [-2, 2], got 3".
//
// Order of application to the logits of one step (as vLLM v1): min_tokens masking, logit_bias,
// repetition / frequency / presence penalties; then temperature (0: greedy argmax, nothing below
// applies), min_p, top_k, top_p and the seeded exponential race (src/runtime/sampling_rng.h).
struct SamplingParams {
  // ---- the distribution ----
  std::optional<float> temperature;  // finite, >= 0; 0 = greedy (default 1.0)
  std::optional<int> top_k;          // 0 or -1: off; else >= 1 (default off)
  std::optional<float> top_p;        // (0, 1]; 1: off (default 1)
  float min_p = 0.0f;                // [0, 1]: drop tokens with p < min_p * max p (0: off)
  // Penalties, as vLLM: repetition over prompt + output tokens (divides a positive logit,
  // multiplies a negative one); presence (once per token present) and frequency (per occurrence)
  // over output tokens, subtracted from the logit.
  std::optional<float> repetition_penalty;  // > 0; 1: off (default 1)
  float presence_penalty = 0.0f;            // [-2, 2]
  float frequency_penalty = 0.0f;           // [-2, 2]
  // token id -> bias added to its logit; ids must be in [0, vocab_size), biases finite; each bias
  // is clamped to [-100, 100] (as vLLM's OpenAI server does).
  std::map<int32_t, float> logit_bias;
  // RNG seed: the same seed, prompt and parameters give the same tokens (on any batch). Unset: a
  // seed drawn per request from a base the engine takes from std::random_device, so runs differ.
  std::optional<uint64_t> seed;

  // ---- how many and how long ----
  int n = 1;                  // [1, 1024] samples of the prompt (they share its KV blocks);
                              // sample i > 0 uses a seed derived from (seed, i), sample 0 `seed`
  int max_tokens = 64;        // >= 1: tokens to generate at most
  int min_tokens = 0;         // [0, max_tokens]: eos and stop_token_ids are masked until this many
                              // tokens were generated (stop strings are not checked before either)
  bool ignore_eos = false;    // keep going past eos ids (stop_token_ids still stop)
  std::vector<int32_t> stop_token_ids;  // generating one of these ends with "stop" (it is kept)
  // Stop strings (none may be empty): the output text ends before the first match (or after it
  // with include_stop_str_in_output), finish_reason "stop". Streamed text never shows a match or
  // part of one (engine/stop_checker.h).
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;

  // ---- what comes back ----
  // [0, 20]: per generated token, the sampled token's logprob and the `logprobs` most likely
  // tokens' logprobs, from the raw log-softmax of the model's logits (before any processing,
  // vLLM's default). Unset: none.
  std::optional<int> logprobs;
  // Per prompt token after the first: its logprob given the tokens before it, its rank, and the
  // `prompt_logprobs` most likely tokens (vLLM's SamplingParams.prompt_logprobs), from the same
  // raw log-softmax. [0, 20], or -1 for the whole vocabulary (what perplexity's KL divergence
  // needs). Such a request computes its whole prompt: it takes no prefix-cache hits for the
  // tokens it scores (vLLM v1 skips the cache too), though its blocks feed the cache for others.
  // With n > 1, sample 0 alone reports them (the prompt is the same).
  std::optional<int> prompt_logprobs;
  bool skip_special_tokens = true;  // decode output text without special tokens

  // ---- structure ----
  std::optional<StructuredOutputsParams> structured_outputs;  // unset: unconstrained
};

}  // namespace nanovllm
