#pragma once
// MixedBatch: the two attention sub-batches of a mixed step (runtime/forward_batch.h: is_prefill
// with num_decode_seqs > 0 leading decodes). The decode sub-batch is seqs [0, nd) and token rows
// [0, nd); the prefill sub-batch is seqs [nd, B) and rows [nd, T) with cu_seqlens_q/k and
// last_token_indices rebased to start at 0. Each is a ForwardBatch of its own, with a HostBatch
// copy (the CPU backend reads host metadata), so attention_decode / attention_prefill see exactly
// what they see in a decode-only / prefill-only step. Only the attention metadata is carried:
// the sampling fields of the sub-batches are empty.
#include "backend/backend.h"
#include "runtime/forward_batch.h"

namespace nanovllm {

class MixedBatch {
 public:
  // Allocates the device buffer of the rebased prefill metadata, for up to max_seqs sequences.
  void reserve(Backend& backend, int max_seqs);
  // Fills decode() and prefill() from a mixed batch (needs batch.host) and uploads the rebased
  // prefill metadata. Requires 0 < num_decode_seqs < num_seqs.
  void split(Backend& backend, const ForwardBatch& batch);
  size_t bytes() const { return buf_.bytes(); }

  const ForwardBatch& decode() const { return decode_; }
  const ForwardBatch& prefill() const { return prefill_; }

 private:
  Buffer buf_;
  Tensor cu_q_, cu_k_, last_;  // i32 [max_seqs + 1], [max_seqs + 1], [max_seqs]
  HostBatch decode_host_, prefill_host_;
  ForwardBatch decode_, prefill_;
};

}  // namespace nanovllm
