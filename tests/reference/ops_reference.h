#pragma once
// The scalar fp32 reference of every Backend op: the oracle each backend is tested against.
// Plain loops over std::vector<float>, row-major and contiguous, shapes passed explicitly; no
// paging (attention takes each sequence's K/V contiguous), no threads, no vectorization.
// bf16 inputs (weights, the KV cache) are passed as the f32 values they hold (see round_bf16).
#include <cstdint>
#include <vector>

namespace nanovllm::ref {

using Vec = std::vector<float>;

float round_bf16(float x);  // f32 -> nearest bf16 -> f32 (round to nearest even)
Vec round_bf16(const Vec& x);
// The quantized GEMM's x (backend/cpu/qgemm.h): for int8 weights integers times max|x| / 16383;
// for int4 weights, in each group of `group` along x, integers times max|x_group| / 127.
Vec round_int16_grid(const Vec& x);
Vec round_int8_groups(const Vec& x, int64_t group);

// out[t] = table[ids[t]]   table: [vocab, hidden]; out: [T, hidden]
Vec embedding(const std::vector<int32_t>& ids, const Vec& table, int64_t hidden);

// One tensor-parallel rank's share of the lookup in the whole [vocab, hidden] table: out[t] =
// table[ids[t]] for ids in [vocab_start, vocab_start + rows), else zeros. out: [T, hidden]
Vec vocab_parallel_embedding(const std::vector<int32_t>& ids, const Vec& table, int64_t hidden,
                             int64_t vocab_start, int64_t rows);

// out = x @ w^T + bias   x: [m, k]; w: [n, k]; bias: [n] or empty; out: [m, n]
Vec linear(const Vec& x, const Vec& w, const Vec& bias, int64_t m, int64_t n, int64_t k);

// out = x / sqrt(mean(x^2) + eps) * weight per row   x: [rows, d]; weight: [d]
Vec rms_norm(const Vec& x, const Vec& weight, int64_t rows, int64_t d, float eps);

// residual += x; x = rms_norm(residual) * weight   x, residual: [rows, d]
void add_rms_norm(Vec& x, Vec& residual, const Vec& weight, int64_t rows, int64_t d, float eps);

// cos_sin[p] = [cos(p * f_i) for i < d/2] ++ [sin(p * f_i)], f_i = theta^(-2i/d): [max_pos, d]
Vec rope_cos_sin(int64_t max_pos, int64_t d, double theta);

// Rotate-half RoPE in place   x: [T, heads, d]; positions: [T]; cos_sin: [max_pos, d]
void rope(Vec& x, const std::vector<int32_t>& positions, const Vec& cos_sin, int64_t heads,
          int64_t d);

// out = silu(x[:, :n]) * x[:, n:]   x: [T, 2n]; out: [T, n]
Vec silu_and_mul(const Vec& x, int64_t tokens, int64_t n);

// out = x[indices]   x: [rows, cols]; out: [indices.size(), cols]
Vec gather_rows(const Vec& x, const std::vector<int32_t>& indices, int64_t cols);

// Causal GQA attention of one sequence's last seqlen_q tokens over its whole context.
// q: [seqlen_q, hq, d]; k, v: [context_len, hkv, d]; query i sits at position
// context_len - seqlen_q + i and attends to keys [0, that position]; head h reads kv head
// h / (hq / hkv). Returns [seqlen_q, hq, d]. Softmax in double.
// fp8: the KV cache's fp8 rounding (runtime/fp8.h) applied to K and V first:
// x -> fp8_e4m3_to_float(float_to_fp8_e4m3(x / scale)) * scale, per fp8->k_scale / v_scale.
struct Fp8KvScales {
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};
// sliding_window > 0: query i attends to keys (its position - sliding_window, its position] only
// (Mistral; transformers' sliding_window_overlay).
Vec attention(const Vec& q, const Vec& k, const Vec& v, int64_t seqlen_q, int64_t context_len,
              int64_t hq, int64_t hkv, int64_t d, float scale, const Fp8KvScales* fp8 = nullptr,
              int64_t sliding_window = 0);

// The sampling rule of runtime/sampling_rng.h with only temperature, top_k, top_p (the full
// rule: reference/sampler_reference.h).
int32_t sample(const Vec& logits, float temperature, int32_t top_k, float top_p, uint64_t seed,
               int64_t offset);

}  // namespace nanovllm::ref
