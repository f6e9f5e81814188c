#pragma once
// Host computation of a token's logprobs from one row of raw logits (the default of
// Backend::compute_logprobs; the CPU backend calls it on its own rows).
#include <cstdint>

#include "nanovllm/logprobs.h"

namespace nanovllm {

// logits: [vocab] f32 raw (NaN counts as -inf). log_softmax in double: with m = max, a token's
// logprob is x - m - log(sum exp(x_j - m)); with +inf logits, the +inf tokens share the mass
// (log(1 / count)) and the rest get -inf; when every logit is -inf or NaN every logprob is -inf.
// Returns token's logprob and rank and the num_top (0..vocab) largest.
StepLogprobs compute_logprobs(const float* logits, int64_t vocab, int32_t token, int num_top);

}  // namespace nanovllm
