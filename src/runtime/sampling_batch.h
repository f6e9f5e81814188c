#pragma once
// SamplingBatch: the per-sequence sampling inputs beyond temperature / top_k / top_p / seed
// (which HostBatch holds as flat arrays): min_p, the penalties, logit_bias, min_tokens masks and
// the number of logprobs wanted. Host-side; reached through ForwardBatch::host->sampling. The
// engine fills it (engine/sampling_batch_fill.cpp); a backend applies it by the rule of
// runtime/sampling_rng.h. Every array is plain data so a device backend can upload it as is.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace nanovllm {

// One token of one sequence whose logit the processing step changes (runtime/sampling_rng.h,
// adjust_logit). A token without an entry keeps its logit (NaN -> -inf).
struct TokenAdjust {
  int32_t token_id = 0;
  int32_t output_count = 0;  // occurrences among the sequence's generated tokens
  float bias = 0.0f;         // logit_bias (already clamped to [-100, 100]); 0 when none
  uint8_t in_context = 0;    // 1: in the prompt or the output (the repetition penalty applies)
  uint8_t masked = 0;        // 1: -inf (min_tokens not reached and the token is eos / a stop id)
  uint8_t pad[2] = {0, 0};
};
static_assert(sizeof(TokenAdjust) == 16);

struct SamplingBatch {
  // All [num_seqs] (or empty: every sequence has the neutral value).
  std::vector<float> min_p;               // 0: off
  std::vector<float> repetition_penalty;  // 1: off
  std::vector<float> frequency_penalty;   // 0: off
  std::vector<float> presence_penalty;    // 0: off
  std::vector<int32_t> num_logprobs;      // -1: no logprobs; else top logprobs wanted (0..20)
  // CSR: the entries of seq b are adjusts[adjust_offsets[b] .. adjust_offsets[b + 1]), sorted by
  // token_id, ids unique. adjust_offsets is [num_seqs + 1] with first 0, or empty (no entries).
  std::vector<int32_t> adjust_offsets;
  std::vector<TokenAdjust> adjusts;
  // Structured outputs: [num_seqs, bitmask_words] allowed tokens (bit t % 32 of word t / 32 set:
  // token t allowed; every other token's logit is -inf before any other processing), with
  // has_bitmask[b] = 1 where seq b's row applies. Empty when no seq is constrained.
  int32_t bitmask_words = 0;
  std::vector<uint32_t> bitmask;
  std::vector<uint8_t> has_bitmask;

  bool empty() const {
    return min_p.empty() && adjust_offsets.empty() && num_logprobs.empty() && bitmask.empty();
  }
  void clear();
  // Whether anything beyond the bitmask is set (min_p, penalties, bias, min_tokens, logprobs):
  // what a device sampler that applies only the bitmask must leave to the host.
  bool processes_logits() const {
    return !(min_p.empty() && adjust_offsets.empty() && num_logprobs.empty());
  }
  bool any_logprobs() const {
    for (int32_t n : num_logprobs)
      if (n >= 0) return true;
    return false;
  }
  // Seq b's fields; neutral for a b past the arrays (empty arrays, padded lanes).
  float min_p_of(int64_t b) const { return at(min_p, b, 0.0f); }
  float repetition_of(int64_t b) const { return at(repetition_penalty, b, 1.0f); }
  float frequency_of(int64_t b) const { return at(frequency_penalty, b, 0.0f); }
  float presence_of(int64_t b) const { return at(presence_penalty, b, 0.0f); }
  int32_t num_logprobs_of(int64_t b) const { return at(num_logprobs, b, int32_t(-1)); }
  // Seq b's allowed-token bitmask, or nullptr when it is unconstrained.
  const uint32_t* bitmask_of(int64_t b) const {
    return size_t(b) < has_bitmask.size() && has_bitmask[size_t(b)]
               ? bitmask.data() + size_t(b) * size_t(bitmask_words)
               : nullptr;
  }
  // Seq b's entries [adjusts_begin(b), adjusts_end(b)) (an empty range when it has none).
  const TokenAdjust* adjusts_begin(int64_t b) const {
    return size_t(b) + 1 < adjust_offsets.size() ? adjusts.data() + adjust_offsets[size_t(b)] : nullptr;
  }
  const TokenAdjust* adjusts_end(int64_t b) const {
    return size_t(b) + 1 < adjust_offsets.size() ? adjusts.data() + adjust_offsets[size_t(b) + 1]
                                                  : nullptr;
  }

 private:
  template <typename T>
  static T at(const std::vector<T>& v, int64_t b, T neutral) {
    return size_t(b) < v.size() ? v[size_t(b)] : neutral;
  }
};

// One sequence's sampling inputs as the engine knows them.
struct SamplingRow {
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t num_logprobs = -1;
  std::span<const int32_t> prompt;   // the prompt's token ids
  std::span<const int32_t> output;   // the tokens generated so far
  std::span<const std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100])
  std::span<const int32_t> masked;   // ids forced to -inf this step (empty: none)
};

// Rebuilds out for rows (one per sequence, in batch order). All arrays stay empty when every row
// is neutral (the sampler's fast path). Cost: O(prompt + output) per row that uses a penalty.
void build_sampling_batch(SamplingBatch& out, std::span<const SamplingRow> rows);

}  // namespace nanovllm
