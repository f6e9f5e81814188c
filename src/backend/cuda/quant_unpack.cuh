#pragma once
// The device side of quant_linear.h's layout, shared by quant_linear.cu (dense linear, embedding)
// and moe.cu (quantized experts): a weight is read in units of 8 k, the unit's raw codes (int8:
// 8 bytes, int4: 4 bytes) and the one scale (and zero) of the group holding it, dequantized to
// f32 in registers exactly as QuantizedWeight::dequantize does.
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/quant_linear.h"

namespace nanovllm::cuda {

// The raw codes of unit u (k 8u..8u+7) of row `row`: int8 8 bytes (x: k 8u..8u+3, y: the rest),
// int4 4 bytes in x.
template <bool kInt4>
__device__ __forceinline__ uint2 quant_load_unit(const QuantWeightView& w, int64_t row,
                                                 int64_t u) {
  const uint8_t* p = w.codes + row * w.row_bytes;
  if constexpr (kInt4) {
    return make_uint2(__ldg(reinterpret_cast<const uint32_t*>(p) + u), 0u);
  } else {
    return __ldg(reinterpret_cast<const uint2*>(p) + u);
  }
}

// The 8 weights of unit u of row `row` from its raw codes: q * s (int8) or (q - z) * s (int4).
template <bool kInt4>
__device__ __forceinline__ void quant_unpack_unit(const QuantWeightView& w, int64_t row,
                                                  int64_t u, uint2 raw, float (&f)[8]) {
  const uint32_t sz = __ldg(w.scales + row * w.groups + (u * 8) / w.group);
  if constexpr (kInt4) {
    const float s = f16_bits_to_f32(sz & 0xffffu), z = f16_bits_to_f32(sz >> 16);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = (float((raw.x >> (4 * e)) & 15u) - z) * s;
  } else {
    const float s = bits_f32(sz);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      f[e] = float(int8_t(uint8_t(raw.x >> (8 * e)))) * s;
      f[4 + e] = float(int8_t(uint8_t(raw.y >> (8 * e)))) * s;
    }
  }
}

// gemv_lane_dots (gemv.cuh) for a quantized weight row: acc[r] += this lane's share of
// dot(w[row], x_row(r)) for r < m (m <= MT); lane l takes the units l, l + 32, ... in that order
// (kGemvUnroll loads in flight), callers warp_sum each acc[r]. Row r's sum never depends on m or
// on the other rows. k % 8 == 0, every x_row(r) 16-byte aligned.
template <int MT, bool kInt4, typename XRow>
__device__ __forceinline__ void quant_lane_dots(float (&acc)[MT], const QuantWeightView& w,
                                                int64_t row, const XRow& x_row, int m,
                                                int lane) {
  const int64_t units = w.k / 8;
  for (int64_t u0 = lane; u0 < units; u0 += 32 * kGemvUnroll) {
    uint2 raw[kGemvUnroll];
#pragma unroll
    for (int v = 0; v < kGemvUnroll; ++v) {
      const int64_t u = u0 + v * 32;
      raw[v] = u < units ? quant_load_unit<kInt4>(w, row, u) : make_uint2(0u, 0u);
    }
#pragma unroll
    for (int v = 0; v < kGemvUnroll; ++v) {
      const int64_t u = u0 + v * 32;
      if (u >= units) break;
      float wf[8];
      quant_unpack_unit<kInt4>(w, row, u, raw[v], wf);
#pragma unroll
      for (int r = 0; r < MT; ++r) {
        if (r < m) {
          float xf[8];
          unpack8(__ldg(reinterpret_cast<const uint4*>(x_row(r)) + u), xf);
          float s = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) s += wf[e] * xf[e];
          acc[r] += s;
        }
      }
    }
  }
}

}  // namespace nanovllm::cuda
