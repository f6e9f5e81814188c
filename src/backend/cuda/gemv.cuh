#pragma once
// The GEMV's inner loop, shared by the dense GEMV (gemv.cu) and the grouped expert GEMV (moe.cu),
// and its epilogue, shared by the dense and the quantized GEMV (quant_linear.cu):
// one warp per output feature, each lane streams 16-byte chunks of the weight row (kGemvUnroll in
// flight) and multiplies them with the same chunk of every x row (read through L1).
#include "backend/cuda/common.cuh"

namespace nanovllm::cuda {

inline constexpr int kGemvUnroll = 4;

// acc[r] += this lane's share of dot(w_row, x_row(r)) over k elements, for r < m (m <= MT): lane
// l takes the chunks l, l + 32, l + 64, ... in that order; callers warp_sum each acc[r]. Row r's
// sum never depends on m or on the other rows. Preconditions: k % 8 == 0, w_row and every
// x_row(r) 16-byte aligned. x_row: a callable int -> const uint16_t* (row r's first element).
template <int MT, typename XRow>
__device__ __forceinline__ void gemv_lane_dots(float (&acc)[MT], const uint16_t* __restrict__ w_row,
                                               const XRow& x_row, int m, int64_t k, int lane) {
  const int64_t chunks = k / 8;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kGemvUnroll) {
    uint4 wv[kGemvUnroll];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int64_t c = c0 + u * 32;
      wv[u] =
          c < chunks ? __ldg(reinterpret_cast<const uint4*>(w_row) + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int64_t c = c0 + u * 32;
      if (c >= chunks) break;
      float wf[8];
      unpack8(wv[u], wf);
#pragma unroll
      for (int r = 0; r < MT; ++r) {
        if (r < m) {
          float xf[8];
          unpack8(__ldg(reinterpret_cast<const uint4*>(x_row(r)) + c), xf);
          float s = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) s += wf[e] * xf[e];
          acc[r] += s;
        }
      }
    }
  }
}

// The GEMV's epilogue: out[r, col] = warp_sum(acc[r]) + bias[col] (0 without bias) for r < m,
// written by lane 0, f32 or bf16.
template <int MT, bool kF32Out>
__device__ __forceinline__ void gemv_store_rows(void* out, int64_t out_stride, float (&acc)[MT],
                                                const uint16_t* bias, int64_t col, int m,
                                                int lane) {
  const float b = bias ? ld_bf16(bias + col) : 0.0f;
#pragma unroll
  for (int r = 0; r < MT; ++r) {
    const float v = warp_sum(acc[r]) + b;
    if (lane == 0 && r < m) {
      if constexpr (kF32Out) {
        static_cast<float*>(out)[r * out_stride + col] = v;
      } else {
        st_bf16(static_cast<uint16_t*>(out) + r * out_stride + col, v);
      }
    }
  }
}

}  // namespace nanovllm::cuda
