#pragma once
// Host launchers of the CUDA kernels (one .cu per op family). Raw pointers and element strides;
// bf16 is passed as uint16_t bits. Each launcher enqueues on `stream` and checks the launch with
// NV_CUDA_CHECK naming its op. CudaBackend (cuda_backend.cpp) validates shapes before calling.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/quant_linear.h"

namespace nanovllm::cuda {

// A 2-D or 3-D activation viewed as rows of d contiguous elements: row r sits at
// (r / inner) * stride0 + (r % inner) * stride1 (inner = 1 and stride1 = 0 for 2-D).
struct Rows {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t inner = 1;
  int64_t stride0 = 0;
  int64_t stride1 = 0;
};

// The paged KV cache of one layer plus the block tables of the batch. An fp8 cache holds the E4M3
// codes of x / scale (runtime/fp8.h); the kernels read code * scale (k_scale folded into the
// score scale, v_scale into the output), and a bf16 cache has both scales 1.
struct PagedKV {
  const void* k = nullptr;  // [num_blocks, block_size, hkv, d] bf16, or E4M3 codes when fp8
  const void* v = nullptr;
  bool fp8 = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  int32_t block_size = 0;
  int32_t hkv = 0;
  int32_t d = 0;
  const int32_t* block_tables = nullptr;  // [num_seqs, table_stride]
  int64_t table_stride = 0;
  // The query at position p attends to keys (p - sliding_window, p] (Mistral); 0: all up to p.
  int32_t sliding_window = 0;
};

// Where a step's K/V rows go: slot s of the cache is row s of k / v ([num_slots, hkv, d]); bf16
// stores the value, fp8 the E4M3 code of value / scale.
struct KVStore {
  void* k = nullptr;
  void* v = nullptr;
  int64_t num_slots = 0;
  bool fp8 = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// embedding.cu
// out[t] = table[ids[t]] (an id outside [0, vocab) writes a NaN row).
void launch_embedding(uint16_t* out, int64_t out_stride, const int32_t* ids, int64_t tokens,
                      const uint16_t* table, int64_t vocab, int64_t hidden, cudaStream_t stream);
// One rank's vocab-parallel lookup: table holds the vocab rows [vocab_start, vocab_start + rows);
// out[t] = table[ids[t] - vocab_start] for an id in that range, a zero row for any other.
void launch_vocab_parallel_embedding(uint16_t* out, int64_t out_stride, const int32_t* ids,
                                     int64_t tokens, const uint16_t* table, int64_t vocab_start,
                                     int64_t rows, int64_t hidden, cudaStream_t stream);
// out[b] = x[idx[b]] for rows of row_bytes bytes (even); strides in bytes.
void launch_gather_rows(void* out, int64_t out_stride_bytes, const void* x, int64_t x_stride_bytes,
                        int64_t x_rows, const int32_t* idx, int64_t n, int64_t row_bytes,
                        cudaStream_t stream);
// out[t, :] += bias (out bf16 or f32 [rows, n]).
void launch_add_bias(void* out, bool out_f32, int64_t out_stride, const uint16_t* bias,
                     int64_t rows, int64_t n, cudaStream_t stream);

// norm.cu
void launch_rms_norm(Rows out, Rows x, const uint16_t* weight, int64_t d, float eps,
                     cudaStream_t stream);
// residual = x + residual; x = rms_norm(residual) * weight   (rows of d, given strides)
void launch_add_rms_norm(uint16_t* x, int64_t x_stride, uint16_t* residual, int64_t r_stride,
                         int64_t rows, const uint16_t* weight, int64_t d, float eps,
                         cudaStream_t stream);

// rope.cu
// x: [tokens, heads, d] as Rows (inner = heads); cos_sin f32 [max_pos, d].
void launch_rope(Rows x, const int32_t* positions, const float* cos_sin, int64_t max_pos, int64_t d,
                 cudaStream_t stream);
// Fused: q, k rms-normed (when q_norm / k_norm are given) and rotated in place, then k and v
// stored at slot_mapping (slot -1: nothing). q: [T, hq, d], k, v: [T, hkv, d] (Rows).
void launch_qk_norm_rope_store(Rows q, Rows k, Rows v, const uint16_t* q_norm,
                               const uint16_t* k_norm, float eps, const int32_t* positions,
                               const float* cos_sin, int64_t max_pos, int64_t d,
                               const int32_t* slot_mapping, KVStore cache, cudaStream_t stream);

// activation.cu: out = silu(x[:, :n]) * x[:, n:]
void launch_silu_and_mul(uint16_t* out, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                         int64_t tokens, int64_t n, cudaStream_t stream);

// kv_cache.cu: cache[slot_mapping[t]] = k[t], v[t]; slot -1 (or outside the cache) skipped.
void launch_store_kv(Rows k, Rows v, int64_t d, const int32_t* slot_mapping, KVStore cache,
                     cudaStream_t stream);

// attention_prefill.cu: out [T, hq, d] contiguous; q [T, hq, d] (Rows, inner = hq).
void launch_attention_prefill(uint16_t* out, Rows q, int32_t hq, PagedKV kv,
                              const int32_t* cu_seqlens_q, const int32_t* context_lens,
                              int32_t num_seqs, int32_t max_seqlen_q, float scale,
                              cudaStream_t stream);
// attention_prefill_mma.cu: the same on the tensor cores, for prefill_uses_mma(d) head dims
// (launch_attention_prefill calls it).
void launch_attention_prefill_mma(uint16_t* out, Rows q, int32_t hq, PagedKV kv,
                                  const int32_t* cu_seqlens_q, const int32_t* context_lens,
                                  int32_t num_seqs, int32_t max_seqlen_q, float scale,
                                  cudaStream_t stream);

// attention_decode.cu: out [B, hq, d] contiguous; q [B, hq, d] (Rows, inner = hq).
// num_partitions: the most any sequence may use (the block table's width); grid_partitions:
// CTAs per (sequence, kv head), each looping over partitions (launch.h decode_grid_partitions).
// partials: f32 workspace of decode_partials_floats(B, hq, d, num_partitions) floats; counters:
// B * hkv int32, zero before the first launch (each launch leaves them zero), when
// num_partitions > 1 (both unused, may be null, otherwise).
int64_t decode_partials_floats(int64_t num_seqs, int64_t hq, int64_t d, int num_partitions);
void launch_attention_decode(uint16_t* out, Rows q, int32_t hq, PagedKV kv,
                             const int32_t* context_lens, int32_t num_seqs, int num_partitions,
                             int grid_partitions, float scale, float* partials, int32_t* counters,
                             cudaStream_t stream);

// gemv.cu: out[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]); m <= kGemvMaxM (launch.h): one row on
// the CUDA cores, 2..16 on the tensor cores (launch_gemv_mma).
void launch_gemv(void* out, bool out_f32, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                 const uint16_t* w, const uint16_t* bias, int64_t m, int64_t n, int64_t k,
                 cudaStream_t stream);

// gemv_mma.cu: the same product on the tensor cores, for up to 16 rows (launch_gemv sends it
// those of launch.h gemv_uses_mma).
void launch_gemv_mma(void* out, bool out_f32, int64_t out_stride, const uint16_t* x,
                     int64_t x_stride, const uint16_t* w, const uint16_t* bias, int64_t m,
                     int64_t n, int64_t k, cudaStream_t stream);

// moe.cu: fused_moe's kernels (CudaBackend::fused_moe in fused_moe.cpp runs them per chunk of
// tokens). A chunk's n = tokens * top_k (token, slot) pairs: pair p = t * top_k + j is slot j of
// token t, and each pair owns one row of the expert GEMMs, rows sorted by expert (stable: by
// pair within an expert). Every size below is read on the device, so the launches are the same
// for every routing (graph capture) and an expert without rows costs nothing.
struct MoeRouting {
  int32_t* topk_ids = nullptr;        // [tokens, top_k] the expert of each pair, routing order
  float* topk_weights = nullptr;      // [tokens, top_k] its weight
  int32_t* expert_offsets = nullptr;  // [E + 1] first row of each expert's rows; [E] = n
  int32_t* pair_row = nullptr;        // [n] pair -> its row
  int32_t* row_token = nullptr;       // [n] row -> the token (of the chunk) it belongs to
  int32_t* items = nullptr;           // [max_items, 2] (expert, first row) of each row tile
  int32_t* num_items = nullptr;       // [1] the tiles in use
};
// The router (runtime/moe_routing.h's rule, f32): topk_ids / topk_weights of each token from
// logits f32 [tokens, E] (row stride logits_stride).
void launch_moe_route(const MoeRouting& r, const float* logits, int64_t logits_stride,
                      int64_t tokens, int num_experts, int top_k, bool renormalize,
                      cudaStream_t stream);
// Counting sort of the pairs by expert (one CTA; E <= kMoeMaxExperts): expert_offsets,
// pair_row, row_token, and the work items, tiles of tile_rows rows of one expert.
void launch_moe_align(const MoeRouting& r, int64_t tokens, int num_experts, int top_k,
                      int tile_rows, cudaStream_t stream);
// The [n, k] weights of one kind (gate_up or down) of every expert, as the grouped GEMMs read
// them: table[e] (a device array) points at expert e's weight, bf16 rows when !quantized, else
// quant_linear.h's layout (codes at table[e], scales at table[e] + scales_offset; the same
// scheme and shape for every expert, described by `layout` whose codes / scales are unset).
struct MoeExpertWeights {
  const void* const* table = nullptr;
  bool quantized = false;
  QuantWeightView layout;
  size_t scales_offset = 0;
};
// Grouped GEMM over the work items: out[row] = x[src(row)] @ w[expert(row)]^T, w bf16 or
// dequantized in registers (f32, exactly as QuantizedWeight::dequantize), f32 accumulation,
// bf16 out [rows, n]; src(row) = row_token[row], or row itself when row_token is null. tiled:
// kMoeTileM-row tiles (launch.h), else the grouped GEMV with tiles of tile_rows (gemv_m_tile)
// rows. k % 8 == 0, x rows and bf16 weights 16-byte aligned.
void launch_moe_gemm(uint16_t* out, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                     const int32_t* row_token, const MoeExpertWeights& weights, const MoeRouting& r,
                     int64_t max_items, bool tiled, int tile_rows, int64_t n, int64_t k,
                     cudaStream_t stream);
// out[t] = sum_j topk_weights[t, j] * y[pair_row[t * top_k + j]] for j = 0..top_k-1 in order, f32
// sums, bf16 out [tokens, hidden] (hidden % 8 == 0, rows 16-byte aligned).
void launch_moe_combine(uint16_t* out, int64_t out_stride, const uint16_t* y, int64_t y_stride,
                        const MoeRouting& r, int64_t tokens, int top_k, int64_t hidden,
                        cudaStream_t stream);

// sampler.cu: the rule of runtime/sampling_rng.h without min_p and logit processing: greedy,
// the exponential race, top-k up to kMaxDeviceTopK and top-p. out[b] = -1 where the device
// cannot decide (top-p alone whose nucleus exceeds kMaxDeviceTopK tokens): the host samples it.
// top_k, top_p: [num_seqs] (top_k <= 0 or >= vocab: off; top_p >= 1: off).
constexpr int kMaxDeviceTopK = 1024;
void launch_sample(int32_t* out, const float* logits, int64_t logits_stride, int64_t num_seqs,
                   int64_t vocab, const float* temperatures, const int32_t* top_k,
                   const float* top_p, const int64_t* seeds, const int64_t* offsets,
                   cudaStream_t stream);

// Structured outputs (runtime/sampling_batch.h): logits[b, t] = -inf for every token t that
// row b's bitmask [num_seqs, words] disallows, in the rows with has_bitmask[b] != 0 (u32 flags).
// In place, before launch_sample.
void launch_apply_token_bitmask(float* logits, int64_t logits_stride, int64_t num_seqs,
                                int64_t vocab, const uint32_t* bitmask, int32_t words,
                                const uint32_t* has_bitmask, cudaStream_t stream);

}  // namespace nanovllm::cuda
