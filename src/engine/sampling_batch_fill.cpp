#include "engine/sampling_batch_fill.h"

#include <span>

#include "util/check.h"

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

void fill_grammar_masks(SamplingBatch& out, const std::vector<Sequence*>& seqs) {
  int32_t words = 0;
  for (const Sequence* seq : seqs)
    if (seq->grammar) words = seq->grammar->vocab().num_bitmask_words();
  if (words == 0) return;
  out.bitmask_words = words;
  out.bitmask.assign(seqs.size() * size_t(words), 0);
  out.has_bitmask.assign(seqs.size(), 0);
  for (size_t b = 0; b < seqs.size(); ++b) {
    Sequence& seq = *seqs[b];
    // Only a seq that samples this step: decode, or the last chunk of its prompt.
    if (!seq.grammar || seq.num_cached_tokens + seq.num_scheduled_tokens < seq.num_tokens()) continue;
    uint32_t* row = out.bitmask.data() + b * size_t(words);
    // A dead end (nothing allowed), or a limit the matcher hit (an Error naming it), samples
    // unconstrained; postprocess then ends that request with an error, and only that one.
    try {
      if (seq.grammar->fill_next_token_bitmask(row) == 0) continue;
    } catch (const Error& e) {
      seq.grammar_error = e.what();
      continue;
    }
    out.has_bitmask[b] = 1;
  }
}

}  // namespace nanovllm
