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

// CTAs per (sequence, kv head) of the decode grid: one per partition of the widest row (a
// sequence with fewer leaves the rest to exit at once), unless that passes kDecodeGridCtasPerSm
// CTAs per SM; then fewer, each looping over its sequence's partitions with stride = this count,
// which changes the speed, never the result. Fixed per captured graph (it depends on the
// bucket's size and the table width only). A CTA per partition keeps the CTAs' work equal: with
// one CTA looping over a whole sequence, the longest sequence of a mixed batch set the kernel's
// time (the H200 profile of 128 sequences: 69% of the copy bandwidth).
inline constexpr int64_t kDecodeGridCtasPerSm = 256;
inline int decode_grid_partitions(int64_t num_seqs, int64_t hkv, int num_sms, int max_partitions) {
  const int64_t ctas = num_seqs * hkv < 1 ? 1 : num_seqs * hkv;
  const int64_t cap = kDecodeGridCtasPerSm * num_sms / ctas;
  const int64_t want = cap < max_partitions ? cap : max_partitions;
  return int(want < 1 ? 1 : want);
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
// walks the keys in tiles of kPrefillKeys; on the tensor cores (head dims up to 128,
// attention_prefill_mma.cu) kPrefillMmaRows rows, 16 per warp.
inline constexpr int kPrefillRows = 32;
inline constexpr int kPrefillMmaRows = 64;
inline constexpr int kPrefillKeys = 64;
inline constexpr int kPrefillThreads = 128;
inline bool prefill_uses_mma(int64_t d) { return d <= 128; }
// Query tokens per CTA of `rows` rows for a GQA group of `group` heads (group <= rows).
inline int prefill_tokens_per_cta(int group, int rows = kPrefillRows) { return rows / group; }
inline int prefill_num_tiles(int max_seqlen_q, int group, int rows = kPrefillRows) {
  const int t = prefill_tokens_per_cta(group, rows);
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
// Rows from which the GEMV runs on the tensor cores (gemv_mma.cu: 8 features a CTA, K split over
// kGemvMmaWarps warps) instead of the CUDA cores (gemv.cu, kept for one row, where it streams at
// the bandwidth it can reach): the CUDA-core tile of 16 rows ran at a sixth of its one-row rate.
inline constexpr int kGemvMmaMinM = 2;
inline constexpr int kGemvMmaWarps = 8;
inline bool gemv_uses_mma(int64_t m) { return m >= kGemvMmaMinM && m <= kGemvMaxM; }
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

// fused_moe (moe.cu). The step's (token, expert) pairs become rows sorted by expert, and the
// expert GEMMs run over work items: (expert, tile of up to `tile rows` of its rows).
inline constexpr int kMoeMaxExperts = 1024;  // the align kernel: one CTA, a thread per expert
inline constexpr int kMoeAlignThreads = 1024;
inline constexpr int kMoeRouterWarps = 4;  // one token per warp
// The tiled expert GEMM (prefill): a 64 x 64 output tile per CTA of 256 threads, k steps of 32.
inline constexpr int kMoeTileM = 64;
inline constexpr int kMoeTileN = 64;
inline constexpr int kMoeTileK = 32;
inline constexpr int kMoeTileThreads = 256;
// Scratch of one chunk of tokens at most this many bytes (the CPU chunks too): a 16k-token
// prefill of Qwen3-30B-A3B would otherwise want 0.7 GiB of expert rows.
inline constexpr int64_t kMoeScratchBytes = int64_t(256) << 20;
// And at most this many rows (keeps the work items of a chunk under the grid's y limit).
inline constexpr int64_t kMoeMaxChunkRows = int64_t(1) << 20;

// Work items for n rows over num_experts experts in tiles of `tile_rows`: at most
// floor(n / tile) full tiles plus one partial tile per expert with rows (the grid's y extent;
// CTAs past the device's count exit).
inline int64_t moe_max_items(int64_t n, int64_t num_experts, int tile_rows) {
  return n / tile_rows + (num_experts < n ? num_experts : n);
}

// Whether a chunk of `tokens` tokens runs the tiled GEMM (else the grouped GEMV, which reads each
// used expert's weights once per 16 rows): when the experts average more than kGemvMaxM rows.
// Decided on tokens rounded up to 16, so an eager decode batch and the graph bucket it pads to
// (1, 2, 4, 8, then multiples of 16) take the same path.
inline bool moe_use_tiled(int64_t tokens, int64_t top_k, int64_t num_experts) {
  return (tokens + 15) / 16 * 16 * top_k > kGemvMaxM * num_experts;
}

// Rows per work item: kMoeTileM for the tiled GEMM, else the GEMV's M tile for the most rows one
// expert can get (a token picks an expert at most once: min(tokens, 16)).
inline int moe_tile_rows(int64_t tokens, int64_t top_k, int64_t num_experts) {
  if (moe_use_tiled(tokens, top_k, num_experts)) return kMoeTileM;
  return gemv_m_tile(tokens < kGemvMaxM ? tokens : kGemvMaxM);
}

// Tokens per chunk: as many as keep top_k * tokens rows of row_bytes under kMoeScratchBytes and
// kMoeMaxChunkRows, at least 1, at most `tokens`.
inline int64_t moe_chunk_tokens(int64_t tokens, int64_t top_k, int64_t row_bytes) {
  int64_t fit = kMoeScratchBytes / (top_k * row_bytes);
  if (fit > kMoeMaxChunkRows / top_k) fit = kMoeMaxChunkRows / top_k;
  return fit < 1 ? 1 : (fit < tokens ? fit : tokens);
}

// Blocks for n items at `per_block` items each, capped for grid-stride loops.
inline int64_t blocks_for(int64_t n, int64_t per_block, int64_t cap = 65535LL * 16) {
  const int64_t b = (n + per_block - 1) / per_block;
  return b < 1 ? 1 : (b > cap ? cap : b);
}

}  // namespace nanovllm::cuda
