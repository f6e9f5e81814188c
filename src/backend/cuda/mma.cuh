#pragma once
// One warp-wide tensor-core product, D[16x8] += A[16x16] * B[16x8] (bf16 in, f32 accumulate), in
// the register layout of PTX's mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16").
// With g = lane / 4 and t = lane % 4, a lane holds
//   a[0] = A[g][2t, 2t+1]    a[1] = A[g+8][2t, 2t+1]    a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   b0   = B[2t, 2t+1][g]    b1   = B[2t+8, 2t+9][g]
//   c[0..1] = D[g][2t, 2t+1]   c[2..3] = D[g+8][2t, 2t+1]
// each u32 two bf16, the lower index in the low half. On sm_80 and later it is the mma.sync
// instruction; elsewhere (the CUDA emulator) the same product from warp shuffles, so the
// kernels that use it run and are tested everywhere.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_math.h"

namespace nanovllm::cuda {

// Two floats as a bf16 pair (round to nearest even): lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(f32_to_bf16_bits(lo)) | (uint32_t(f32_to_bf16_bits(hi)) << 16);
}

// (a, b) as hi + lo, two bf16 pairs: hi rounded to nearest, lo the rounding error (rounded), so
// hi + lo carries about 16 significant bits.
__device__ __forceinline__ void split_bf16x2(float a, float b, uint32_t& hi, uint32_t& lo) {
  hi = pack_bf16x2(a, b);
  lo = pack_bf16x2(a - bits_f32(hi << 16), b - bits_f32(hi & 0xffff0000u));
}

__device__ __forceinline__ void mma_bf16_m16n8k16(float* c, const uint32_t* a, uint32_t b0,
                                                  uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const auto lo = [](uint32_t w) { return bits_f32(w << 16); };
  const auto hi = [](uint32_t w) { return bits_f32(w & 0xffff0000u); };
  // Quad member kk of a row's (or column's) lanes holds its k = 2kk, 2kk+1, 2kk+8, 2kk+9.
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t r0 = __shfl_sync(0xffffffffu, a[0], g * 4 + kk);  // A[g][2kk, 2kk+1]
    const uint32_t r1 = __shfl_sync(0xffffffffu, a[1], g * 4 + kk);  // A[g+8][2kk, 2kk+1]
    const uint32_t r2 = __shfl_sync(0xffffffffu, a[2], g * 4 + kk);  // A[g][2kk+8, 2kk+9]
    const uint32_t r3 = __shfl_sync(0xffffffffu, a[3], g * 4 + kk);  // A[g+8][2kk+8, 2kk+9]
    for (int j = 0; j < 2; ++j) {
      const int n = 2 * t + j;  // this lane's output column
      const uint32_t c0 = __shfl_sync(0xffffffffu, b0, n * 4 + kk);  // B[2kk, 2kk+1][n]
      const uint32_t c1 = __shfl_sync(0xffffffffu, b1, n * 4 + kk);  // B[2kk+8, 2kk+9][n]
      c[j] += lo(r0) * lo(c0) + hi(r0) * hi(c0) + lo(r2) * lo(c1) + hi(r2) * hi(c1);
      c[2 + j] += lo(r1) * lo(c0) + hi(r1) * hi(c0) + lo(r3) * lo(c1) + hi(r3) * hi(c1);
    }
  }
#endif
}

}  // namespace nanovllm::cuda
