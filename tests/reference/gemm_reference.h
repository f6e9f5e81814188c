#pragma once
// Scalar fp32 reference of the linear layer: the oracle for every backend's GEMM.
#include <cstdint>

namespace nanovllm::ref {

// out[m, n] = bf16(x)[m, k] @ w[n, k]^T (+ bias[n]), accumulated in double, stored as f32.
// x: f32 rows at stride ldx, rounded to bf16 (nearest even) first, as a bf16 GEMM does.
// w: bf16 bits, row-major [n, k]. bias: bf16 [n] or nullptr. out: rows at stride ldo.
void linear(float* out, int64_t ldo, const float* x, int64_t ldx, const uint16_t* w,
            const uint16_t* bias, int64_t m, int64_t n, int64_t k);

// abs_out[m, n] = sum_k |bf16(x)[m, k] * w[n, k]| (+ |bias[n]|): the magnitude a tolerance
// for reordered fp32 sums scales with.
void linear_abs(float* abs_out, int64_t ldo, const float* x, int64_t ldx, const uint16_t* w,
                const uint16_t* bias, int64_t m, int64_t n, int64_t k);

}  // namespace nanovllm::ref
