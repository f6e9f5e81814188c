#include "runtime/sampling_batch.h"

#include <algorithm>

namespace nanovllm {

void SamplingBatch::clear() {
  min_p.clear();
  repetition_penalty.clear();
  frequency_penalty.clear();
  presence_penalty.clear();
  num_logprobs.clear();
  adjust_offsets.clear();
  adjusts.clear();
  bitmask_words = 0;
  bitmask.clear();
  has_bitmask.clear();
}

namespace {

bool is_neutral(const SamplingRow& r) {
  return r.min_p == 0.0f && r.repetition_penalty == 1.0f && r.frequency_penalty == 0.0f &&
         r.presence_penalty == 0.0f && r.num_logprobs < 0 && r.logit_bias.empty() &&
         r.masked.empty();
}

// Appends row's entries to adjusts, sorted by token id and merged.
void append_adjusts(std::vector<TokenAdjust>& adjusts, const SamplingRow& r) {
  const size_t begin = adjusts.size();
  auto add = [&](int32_t token) -> TokenAdjust& {
    TokenAdjust a;
    a.token_id = token;
    adjusts.push_back(a);
    return adjusts.back();
  };
  if (r.repetition_penalty != 1.0f) {
    for (int32_t t : r.prompt) add(t).in_context = 1;
    for (int32_t t : r.output) add(t).in_context = 1;
  }
  if (r.frequency_penalty != 0.0f || r.presence_penalty != 0.0f) {
    for (int32_t t : r.output) add(t).output_count = 1;
  }
  for (auto [t, bias] : r.logit_bias) add(t).bias = bias;
  for (int32_t t : r.masked) add(t).masked = 1;
  std::stable_sort(adjusts.begin() + ptrdiff_t(begin), adjusts.end(),
                   [](const TokenAdjust& a, const TokenAdjust& b) { return a.token_id < b.token_id; });
  // Merge runs of one token id.
  size_t w = begin;
  for (size_t i = begin; i < adjusts.size(); ++i) {
    const TokenAdjust& a = adjusts[i];
    if (w > begin && adjusts[w - 1].token_id == a.token_id) {
      TokenAdjust& m = adjusts[w - 1];
      m.output_count += a.output_count;
      m.bias += a.bias;  // logit_bias holds each id once: at most one nonzero
      m.in_context |= a.in_context;
      m.masked |= a.masked;
    } else {
      adjusts[w++] = a;
    }
  }
  adjusts.resize(w);
}

}  // namespace

void build_sampling_batch(SamplingBatch& out, std::span<const SamplingRow> rows) {
  out.clear();
  if (std::all_of(rows.begin(), rows.end(), is_neutral)) return;
  out.adjust_offsets.push_back(0);
  for (const SamplingRow& r : rows) {
    out.min_p.push_back(r.min_p);
    out.repetition_penalty.push_back(r.repetition_penalty);
    out.frequency_penalty.push_back(r.frequency_penalty);
    out.presence_penalty.push_back(r.presence_penalty);
    out.num_logprobs.push_back(r.num_logprobs);
    append_adjusts(out.adjusts, r);
    out.adjust_offsets.push_back(int32_t(out.adjusts.size()));
  }
}

}  // namespace nanovllm
