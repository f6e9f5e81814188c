#pragma once
// ForwardBatch: everything one model step needs besides the weights and the KV cache, built by
// ModelRunner::prepare_prefill / prepare_decode and passed explicitly to the model and to every
// attention op (nano-vllm keeps this in a module-level global; we pass it).
#include <cstdint>
#include <vector>

#include "runtime/sampling_batch.h"
#include "runtime/tensor.h"

namespace nanovllm {

// Host-side step description. ModelRunner owns one, reserved once at the engine's maxima and
// refilled in place every step (clear() keeps the capacity), then uploads it into ForwardBatch's
// fixed tensors.
//
// Padded decode lanes (a decode batch padded up to a CUDA-graph bucket): input id 0, position 0,
// slot -1 (writes nothing), context_len 1 over block 0 (whose slot 0 is always finite: zeroed when
// the cache is allocated, real KV after), temperature 0. Their logits and tokens are dropped.
//
// A mixed step (scheduling "mixed": decodes and prefill chunks in one step) has is_prefill = true
// and its first num_decode_seqs sequences are decodes, one token each (rows [0, num_decode_seqs)),
// the prefill chunks after them. The model runs attention_decode on the decode rows and
// attention_prefill on the others (the sub-batches of model/mixed_batch.h), every other op once
// over all rows, so a decode token's numbers are those of a decode-only step.
struct HostBatch {
  bool is_prefill = false;
  int num_decode_seqs = 0;                  // prefill step: leading decode seqs (0: a pure prefill)
  std::vector<int32_t> input_ids;           // [num_tokens]
  std::vector<int32_t> positions;           // [num_tokens] position of each token in its sequence
  std::vector<int32_t> slot_mapping;        // [num_tokens] KV slot = block_id * block_size + offset; -1 = write nothing
  std::vector<int32_t> cu_seqlens_q;        // [num_seqs + 1] prefix sums of new tokens per seq, first 0
  std::vector<int32_t> cu_seqlens_k;        // [num_seqs + 1] prefix sums of context lengths (cached + new), first 0
  std::vector<int32_t> context_lens;        // [num_seqs] tokens in the KV cache once this step's are stored
  std::vector<int32_t> block_tables;        // [num_seqs, max_num_blocks] block ids, -1 padded
                                            // (the width is the same every step)
  std::vector<int32_t> last_token_indices;  // [num_seqs] row (in [0, num_tokens)) of each seq's last token
  std::vector<int32_t> logit_rows;          // [num_scored] rows whose logits prompt logprobs need
                                            // (row p of a seq scores its token p + 1)
  int max_num_blocks = 0;                   // block_tables row width
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  // Sampling, one entry per seq (used only for seqs that sample this step).
  std::vector<float> temperatures;          // [num_seqs] 0 = greedy
  std::vector<int32_t> top_k;               // [num_seqs] <= 0: off
  std::vector<float> top_p;                 // [num_seqs] 1: off
  std::vector<uint64_t> seeds;              // [num_seqs] per-request RNG seed
  std::vector<int64_t> sample_offsets;      // [num_seqs] RNG counter: tokens in the seq before the sampled one
  SamplingBatch sampling;                   // min_p, penalties, logit_bias, min_tokens, logprobs

  int num_seqs() const { return int(cu_seqlens_q.empty() ? 0 : cu_seqlens_q.size() - 1); }
  // Empties every vector, keeping its capacity (no reallocation from step to step).
  void clear() {
    input_ids.clear(), positions.clear(), slot_mapping.clear(), cu_seqlens_q.clear();
    cu_seqlens_k.clear(), context_lens.clear(), block_tables.clear(), last_token_indices.clear();
    logit_rows.clear();
    temperatures.clear(), top_k.clear(), top_p.clear(), seeds.clear(), sample_offsets.clear();
    max_num_blocks = max_seqlen_q = max_seqlen_k = num_decode_seqs = 0;
  }
  int num_tokens() const { return int(input_ids.size()); }
};

// The same fields as device tensors, plus the host copy for backends that want to read metadata
// on the host (the CPU backend does). The tensors are views into one buffer owned by ModelRunner,
// allocated once at the maxima (max_num_batched_tokens tokens, max_num_seqs sequences), so every
// field starts at the same address in every step: a captured CUDA graph replays over them.
// In a captured decode graph the scalars are those of the capture: num_seqs = num_tokens = the
// bucket, max_seqlen_q = 1, max_seqlen_k = max_model_len (an upper bound); kernels must take the
// per-sequence lengths from context_lens on the device.
struct ForwardBatch {
  const HostBatch* host = nullptr;
  bool is_prefill = false;
  int num_decode_seqs = 0;    // = host->num_decode_seqs (see HostBatch: a mixed step when > 0)
  int num_seqs = 0;
  int num_tokens = 0;
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  Tensor input_ids;           // i32 [num_tokens]
  Tensor positions;           // i32 [num_tokens]
  Tensor slot_mapping;        // i32 [num_tokens]
  Tensor cu_seqlens_q;        // i32 [num_seqs + 1]
  Tensor cu_seqlens_k;        // i32 [num_seqs + 1]
  Tensor context_lens;        // i32 [num_seqs]
  Tensor block_tables;        // i32 [num_seqs, max_num_blocks]; max_num_blocks =
                              // ceil(max_model_len / block_size) + 1 in every step
  Tensor last_token_indices;  // i32 [num_seqs]
  Tensor temperatures;        // f32 [num_seqs]
  Tensor top_k;               // i32 [num_seqs]
  Tensor top_p;               // f32 [num_seqs]
  Tensor seeds;               // i64 [num_seqs] (bits of a uint64)
  Tensor sample_offsets;      // i64 [num_seqs]
};

}  // namespace nanovllm
