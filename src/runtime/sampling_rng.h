#pragma once
// The sampling rule every backend implements bit for bit in its choice of token (a counter-based
// RNG, so that CPU, CUDA and the reference pick the same token for the same seed). For one
// sequence with logits x [V] (f32) and the per-sequence fields of runtime/sampling_batch.h:
//
//  1. Processing (vLLM v1's order; only tokens listed in the sequence's TokenAdjust table change,
//     see adjust_logit):  y_i = x_i, NaN -> -inf;  masked (min_tokens not reached: eos and
//     stop_token_ids) -> -inf;  + logit_bias;  repetition penalty r on tokens of prompt + output
//     (y > 0 ? y / r : y * r);  - frequency_penalty * output count;  - presence_penalty if the
//     token is in the output.
//  2. temperature == 0: argmax(y), lowest index on ties (all -inf: token 0).
//  3. Otherwise, with m = max(y):
//       m == -inf (every logit -inf or NaN): token 0;
//       m == +inf: d_i = 0 where y_i == +inf, else -inf (the race is among the +inf tokens);
//       else d_i = (y_i - m) / temperature  (scaled_logit: <= 0, never NaN, no overflow for any
//       positive temperature: 1e-40 leaves 0 for the maxima and -inf or huge negatives elsewhere).
//     min_p > 0 keeps i with exp(double(d_i)) >= min_p (p_i >= min_p * p_max);
//     top_k > 0 then keeps the top_k largest d_i (ties: lower index first);
//     top_p < 1 then keeps the shortest prefix, by d descending then index ascending, whose
//       cumulative exp(double(d_i)) reaches top_p * z, z = the sum of exp(double(d_i)) over the
//       kept set in ascending index order (if none reaches it: all kept stay);
//     token = argmax over kept i of  race_score(d_i, u_i) = d_i - log(-log(u_i)) (f32),
//       u_i = sample_uniform(seed, offset, i), ties: lowest index (the exponential race,
//       argmax p_i / E_i with E_i ~ Exp(1)).
//   offset = the number of tokens in the sequence before the sampled one.
// The token depends only on (x, the sequence's fields, seed, offset), never on the batch.
#include <cmath>
#include <cstdint>

#include "runtime/host_device.h"

namespace nanovllm {

NV_HOST_DEVICE inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), 23 random bits, never 0 or 1: (k + 0.5) / 2^23 is exact in f32 for every
// k < 2^23 (with 24 bits, k = 2^24 - 1 would round up to exactly 1).
NV_HOST_DEVICE inline float sample_uniform(uint64_t seed, int64_t offset, int64_t index) {
  uint64_t h = mix64(mix64(seed ^ mix64(uint64_t(offset))) ^ uint64_t(index));
  return (float(h >> 41) + 0.5f) * (1.0f / 8388608.0f);
}

// The seed of sample i of a request with n > 1 samples: sample 0 keeps the request's seed (so it
// equals the n == 1 output), the others get independent streams.
NV_HOST_DEVICE inline uint64_t sample_seed(uint64_t seed, int index) {
  return index == 0 ? seed : mix64(seed ^ mix64(0x5a3b1e00ull + uint64_t(index)));
}

// One token's processed logit (step 1): x its raw logit; masked, bias, in_context (in prompt or
// output), output_count from its TokenAdjust entry; r, freq, pres the sequence's penalties.
NV_HOST_DEVICE inline float adjust_logit(float x, bool masked, float bias, bool in_context,
                                         int32_t output_count, float r, float freq, float pres) {
  if (masked || x != x) return -INFINITY;
  float y = x + bias;
  if (in_context && r != 1.0f) y = y > 0.0f ? y / r : y * r;
  if (output_count > 0) {
    y = y - freq * float(output_count);
    y = y - pres;
  }
  return y;
}

// A token without a TokenAdjust entry: NaN counts as -inf.
NV_HOST_DEVICE inline float clean_logit(float x) { return x != x ? -INFINITY : x; }

// d_i of step 3 for max m (finite or +inf; never called with m == -inf).
NV_HOST_DEVICE inline float scaled_logit(float y, float m, float temperature) {
  if (m == INFINITY) return y == INFINITY ? 0.0f : -INFINITY;
  return (y - m) / temperature;
}

// The race score of d against the uniform u (the CPU computes log in f32 via std::log).
NV_HOST_DEVICE inline float race_score(float d, float u) {
  const float e = -logf(u);
  return d - logf(e);
}

// Pruning bounds for the race, not part of the rule. The most race_score(d, u) can exceed d by:
// -log(-log(u)) for the largest u sample_uniform returns, 1 - 2^-24 (16.64), with room for the
// f32 rounding of the logarithms and the sum. A token whose d is more than this below a score
// some token reaches cannot win or tie.
inline constexpr float kMaxRaceNoise = 17.0f;

// The least u whose race noise -log(-log u) can reach `need`: a token of logit d scores
// race_score(d, u) = d + (that noise), so it reaches a score S only if the noise reaches S - d,
// and S - d >= S for every d <= 0. A u below exp(-exp(-need)) cannot. Taken for need less 1e-3
// (the f32 scores lie within 1e-5 of the exact ones) and lowered by 1e-6 (16 f32 ulps at 1; expf
// errs by a few): never above the exact bound, so a race that skips the tokens with
// u < race_u_floor(best score so far - d), or with race_u_floor(best score so far), skips none
// that could win or tie. After a few tokens the bound is near 1: the logarithms of almost every
// token are skipped, however flat the logits.
NV_HOST_DEVICE inline float race_u_floor(float need) { return expf(-expf(1e-3f - need)) - 1e-6f; }

// min_p's test on d (step 3).
NV_HOST_DEVICE inline bool min_p_keeps(float d, float min_p) {
  return exp(double(d)) >= double(min_p);
}

}  // namespace nanovllm
