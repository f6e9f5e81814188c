#pragma once
// The per-element math of the CUDA kernels, as NV_HOST_DEVICE inline functions so the CPU unit
// tests (tests/unit/cuda_math_test.cpp) check the exact expressions the GPU runs: bf16 <-> f32,
// f16 -> f32,
// rotate-half RoPE, the online softmax and its log-sum-exp merge, SiLU, KV slot offsets, the
// vocab-parallel embedding's row.
// Plain C++ (no CUDA headers): g++ compiles it for the tests.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/host_device.h"

namespace nanovllm::cuda {

NV_HOST_DEVICE inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

NV_HOST_DEVICE inline float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// bf16 bits -> f32 (exact).
NV_HOST_DEVICE inline float bf16_bits_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

// f32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN. Same as the host's
// f32_to_bf16 in runtime/tensor.h and as __float2bfloat16_rn.
NV_HOST_DEVICE inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// f16 bits -> f32, exactly (subnormals, infinities and NaN included): the int4 weights' scale
// and zero (quant_linear.h).
NV_HOST_DEVICE inline float f16_bits_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float f = float(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return sign ? -f : f;
  }
  return bits_f32(exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                            : (sign | ((exp + 112) << 23) | (mant << 13)));
}

// Rotate-half RoPE of one pair (x1 = x[i], x2 = x[i + D/2]) with c = cos, s = sin of angle i.
struct RotatedPair {
  float x1, x2;
};
// On the device every product and sum is rounded on its own (no FMA contraction left to ptxas),
// so the separate rope kernel and the fused q/k-norm + RoPE + store kernel give the same bits.
NV_HOST_DEVICE inline RotatedPair rope_rotate(float x1, float x2, float c, float s) {
#if defined(__CUDA_ARCH__)
  return {__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)),
          __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s))};
#else
  return {x1 * c - x2 * s, x2 * c + x1 * s};
#endif
}

// silu(g) * u (F.silu(gate) * up), in f32.
NV_HOST_DEVICE inline float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// Element offset of KV slot `slot` in a cache viewed as [num_slots, row_elems]: 64-bit, since
// num_slots * Hkv * D passes 2^31 on a large GPU cache.
NV_HOST_DEVICE inline int64_t slot_offset(int32_t slot, int64_t row_elems) {
  return int64_t(slot) * row_elems;
}

// Row of a vocab-parallel embedding slice (vocab rows [vocab_start, vocab_start + rows)) that
// holds token `id`, or -1 when another rank holds it (the lookup then writes a zero row).
NV_HOST_DEVICE inline int64_t vocab_slice_row(int32_t id, int64_t vocab_start, int64_t rows) {
  const int64_t r = int64_t(id) - vocab_start;
  return r >= 0 && r < rows ? r : -1;
}

// Slot of key j of a sequence whose block table row is `table` (block ids), block_size tokens
// per block: table[j / block_size] * block_size + j % block_size.
NV_HOST_DEVICE inline int64_t key_slot(const int32_t* table, int32_t j, int32_t block_size) {
  return int64_t(table[j / block_size]) * block_size + j % block_size;
}

// Online softmax state of one query row over the keys seen so far: m = max score, l = sum of
// exp(score - m). A partition's result is (m, l, acc = sum exp(s - m) * v); two partitions merge
// by rescaling to the larger max.
struct SoftmaxState {
  float m;  // -inf when no key was seen
  float l;
};

// The factor that rescales the old accumulator when the max moves from m_old to m_new
// (exp(-inf - x) = 0 for an empty state).
NV_HOST_DEVICE inline float rescale_factor(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}

// Weights of two partial results (a, b) in their merge: out = (wa * acc_a + wb * acc_b) / l with
// l = wa * l_a + wb * l_b. Exact LSE merge: with m = max(m_a, m_b), wa = exp(m_a - m).
struct MergeWeights {
  float wa, wb, l;
};
NV_HOST_DEVICE inline MergeWeights merge_weights(SoftmaxState a, SoftmaxState b) {
  const float m = a.m > b.m ? a.m : b.m;
  if (m == -INFINITY) return {0.0f, 0.0f, 0.0f};
  const float wa = rescale_factor(a.m, m), wb = rescale_factor(b.m, m);
  return {wa, wb, wa * a.l + wb * b.l};
}

// Query position of query i (0-based) of a sequence with seqlen_q new tokens and context_len keys
// once they are stored: it attends to keys [0, position].
NV_HOST_DEVICE inline int32_t query_position(int32_t context_len, int32_t seqlen_q, int32_t i) {
  return context_len - seqlen_q + i;
}

// Element offset of row r of a [rows, inner, D] tensor viewed as rows * inner rows of D elements
// (3-D strided; inner == 1 for 2-D).
NV_HOST_DEVICE inline int64_t row_offset(int64_t r, int64_t inner, int64_t stride0,
                                         int64_t stride1) {
  return (r / inner) * stride0 + (r % inner) * stride1;
}

}  // namespace nanovllm::cuda
