#include "engine/sampling_batch_fill.h"

#include <span>

namespace nanovllm {

void fill_sampling_batch(SamplingBatch& out, const std::vector<Sequence*>& seqs) {
  std::vector<SamplingRow> rows(seqs.size());
  for (size_t b = 0; b < seqs.size(); ++b) {
    const Sequence& seq = *seqs[b];
    const ResolvedSampling& s = seq.sampling;
    SamplingRow& r = rows[b];
    r.min_p = s.min_p;
    r.repetition_penalty = s.repetition_penalty;
    r.frequency_penalty = s.frequency_penalty;
    r.presence_penalty = s.presence_penalty;
    r.num_logprobs = s.logprobs;
    const std::span<const int32_t> tokens(seq.token_ids);
    r.prompt = tokens.first(size_t(seq.num_prompt_tokens));
    r.output = tokens.subspan(size_t(seq.num_prompt_tokens));
    r.logit_bias = s.logit_bias;
    if (seq.num_completion_tokens() < s.min_tokens) r.masked = s.min_tokens_mask;
  }
  build_sampling_batch(out, rows);
}

}  // namespace nanovllm
