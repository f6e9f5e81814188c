#pragma once
// Fills a step's SamplingBatch (runtime/sampling_batch.h) from its sequences: the penalties'
// prompt / output tokens, logit_bias, the min_tokens masks and the logprobs wanted.
#include <vector>

#include "engine/sequence.h"
#include "runtime/sampling_batch.h"

namespace nanovllm {

// One row per seq, in order (the batch's sequence order). All arrays stay empty when no seq
// uses any of these fields.
void fill_sampling_batch(SamplingBatch& out, const std::vector<Sequence*>& seqs);
// The allowed-token bitmasks of the seqs with a grammar that sample this step, into out (already
// filled by fill_sampling_batch for the same seqs); nothing when none has one. ModelRunner calls
// it after launching the step's forward, so the masks are computed while the device runs it.
void fill_grammar_masks(SamplingBatch& out, const std::vector<Sequence*>& seqs);

}  // namespace nanovllm
