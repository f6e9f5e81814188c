#pragma once
// Step descriptions for the tensor-parallel tests: sequences with fixed block tables
// (kBlocksPerSeq blocks of kBlock tokens each, seq s on blocks [s * kBlocksPerSeq, ...)),
// a prefill of all their tokens, and a decode of their last token.
#include <algorithm>
#include <vector>

#include "runtime/forward_batch.h"

namespace nanovllm::test {

constexpr int kBlock = 16, kBlocksPerSeq = 4;

struct Seq {
  std::vector<int32_t> tokens;
  int block0;
};

inline int32_t slot(const Seq& s, int pos) { return (s.block0 + pos / kBlock) * kBlock + pos % kBlock; }

inline void fill_common(HostBatch& h, const std::vector<Seq>& seqs) {
  h.max_num_blocks = kBlocksPerSeq;
  for (const Seq& s : seqs) {
    for (int b = 0; b < kBlocksPerSeq; ++b) h.block_tables.push_back(s.block0 + b);
  }
}

inline HostBatch prefill_batch(const std::vector<Seq>& seqs) {
  HostBatch h;
  h.is_prefill = true;
  h.cu_seqlens_q.push_back(0);
  h.cu_seqlens_k.push_back(0);
  for (const Seq& s : seqs) {
    const int n = int(s.tokens.size());
    for (int p = 0; p < n; ++p) {
      h.input_ids.push_back(s.tokens[size_t(p)]);
      h.positions.push_back(p);
      h.slot_mapping.push_back(slot(s, p));
    }
    h.cu_seqlens_q.push_back(h.cu_seqlens_q.back() + n);
    h.cu_seqlens_k.push_back(h.cu_seqlens_k.back() + n);
    h.context_lens.push_back(n);
    h.last_token_indices.push_back(h.cu_seqlens_q.back() - 1);
    h.max_seqlen_q = std::max(h.max_seqlen_q, n);
    h.max_seqlen_k = std::max(h.max_seqlen_k, n);
  }
  fill_common(h, seqs);
  return h;
}

// The last token of each sequence is the new one.
inline HostBatch decode_batch(const std::vector<Seq>& seqs) {
  HostBatch h;
  h.cu_seqlens_q.push_back(0);
  h.cu_seqlens_k.push_back(0);
  for (const Seq& s : seqs) {
    const int n = int(s.tokens.size());
    h.input_ids.push_back(s.tokens.back());
    h.positions.push_back(n - 1);
    h.slot_mapping.push_back(slot(s, n - 1));
    h.cu_seqlens_q.push_back(h.cu_seqlens_q.back() + 1);
    h.cu_seqlens_k.push_back(h.cu_seqlens_k.back() + n);
    h.context_lens.push_back(n);
    h.last_token_indices.push_back(int(h.last_token_indices.size()));
    h.max_seqlen_q = 1;
    h.max_seqlen_k = std::max(h.max_seqlen_k, n);
  }
  fill_common(h, seqs);
  return h;
}

// Two prompts (20 and 7 tokens) of ids below vocab.
inline std::vector<Seq> tp_prompts(int vocab) {
  std::vector<Seq> seqs;
  for (int s = 0; s < 2; ++s) {
    Seq q{{}, s * kBlocksPerSeq};
    for (int i = 0; i < (s == 0 ? 20 : 7); ++i) q.tokens.push_back((i * 37 + s * 11 + 5) % vocab);
    seqs.push_back(q);
  }
  return seqs;
}

}  // namespace nanovllm::test
