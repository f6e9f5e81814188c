#pragma once
// Launch geometry of the CUDA kernels: small host functions (plain C++, checked by
// tests/unit/cuda_math_test.cpp) so each kernel's grid and tiling rule is stated once.
#include <cstdint>

namespace nanovllm::cuda {

// Threads per CTA of the row kernels (norms, RoPE, store_kv) and rows each warp takes.
inline constexpr int kRowThreads = 128;
// The fused q/k-norm + RoPE + store_kv kernel keeps one head row in shared memory.
inline constexpr int kFusedMaxHeadDim = 256;

// Decode attention: a fixed number of keys per partition, so a sequence's partitions (and its
// output) never depend on the batch it runs in; partitions of one sequence merge by their LSE.
inline constexpr int kDecodePartitionKeys = 256;
inline constexpr int kDecodeThreads = 128;
inline constexpr int kMaxGqaGroup = 8;  // query heads per kv head the decode kernel serves

// Partitions that cover `max_keys` keys (the grid's x extent; a sequence with fewer keys leaves
// the rest idle). At least 1.
inline int decode_num_partitions(int64_t max_keys) {
  const int64_t p = (max_keys + kDecodePartitionKeys - 1) / kDecodePartitionKeys;
  return int(p < 1 ? 1 : p);
}

// Partitions sequence b actually uses: its own context length, never the batch's maximum.
inline int decode_seq_partitions(int64_t context_len) { return decode_num_partitions(context_len); }

// CTAs per (sequence, kv head) of the decode grid: about 4 waves of CTAs over the SMs, at most
// the partitions the widest row can have, at least 1. Each CTA loops over its sequence's
// partitions with stride = this count, so it changes the speed, never the result. Fixed per
// captured graph (it depends on the bucket's size and the table width only).
inline int decode_grid_partitions(int64_t num_seqs, int64_t hkv, int num_sms, int max_partitions) {
  const int64_t ctas = num_seqs * hkv;
  const int64_t want = (int64_t(4) * num_sms + ctas - 1) / (ctas < 1 ? 1 : ctas);
  return int(want < 1 ? 1 : (want > max_partitions ? max_partitions : want));
}

// The decode kernel's register tile of query heads: the smallest of 1, 2, 4, 8 that holds a GQA
// group of `group` heads; 0 if none does.
inline int decode_group_tile(int group) {
  for (int t = 1; t <= kMaxGqaGroup; t *= 2)
    if (group <= t) return t;
  return 0;
}

// Head dims the attention kernels are built for (8-element 16-byte chunks, D / 8 lanes per key).
inline bool attention_head_dim_supported(int64_t d) {
  return d == 16 || d == 32 || d == 64 || d == 128 || d == 256;
}

// Prefill attention: a CTA takes kPrefillRows query rows (tokens x the heads of one kv head) and
// walks the keys in tiles of kPrefillKeys.
inline constexpr int kPrefillRows = 32;
inline constexpr int kPrefillKeys = 64;
inline constexpr int kPrefillThreads = 128;
// Query tokens per CTA for a GQA group of `group` heads (group <= kPrefillRows).
inline int prefill_tokens_per_cta(int group) { return kPrefillRows / group; }
inline int prefill_num_tiles(int max_seqlen_q, int group) {
  const int t = prefill_tokens_per_cta(group);
  return (max_seqlen_q + t - 1) / t;
}

// GEMV (bf16 weights, M <= kGemvMaxM rows) instead of cuBLASLt; the M tile is the smallest of
// 1, 2, 4, 8, 16 holding M. A row's result never depends on M (same lanes, same order).
inline constexpr int kGemvMaxM = 16;
inline constexpr int kGemvWarps = 4;  // one output feature per warp
inline int gemv_m_tile(int64_t m) {
  for (int t = 1; t <= kGemvMaxM; t *= 2)
    if (m <= t) return t;
  return 0;
}
// 16-byte loads need K % 8 == 0 and 16-byte aligned rows.
inline bool gemv_eligible(int64_t m, int64_t k, int64_t x_stride, uintptr_t x, uintptr_t w) {
  return m >= 1 && m <= kGemvMaxM && k % 8 == 0 && x_stride % 8 == 0 && x % 16 == 0 && w % 16 == 0;
}

// cuBLASLt's algorithm for M rows is chosen for this M (and cached): decode batches padded to a
// graph bucket (steps of 16) and eager ones of the same bucket get the same algorithm, so graphs
// on or off give the same rows.
inline int64_t gemm_algo_m(int64_t m) {
  if (m <= 512) return (m + 15) / 16 * 16;
  return (m + 255) / 256 * 256;
}

// Blocks for n items at `per_block` items each, capped for grid-stride loops.
inline int64_t blocks_for(int64_t n, int64_t per_block, int64_t cap = 65535LL * 16) {
  const int64_t b = (n + per_block - 1) / per_block;
  return b < 1 ? 1 : (b > cap ? cap : b);
}

}  // namespace nanovllm::cuda
