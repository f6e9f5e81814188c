#pragma once
// One warp-wide tensor-core product, D[16x8] += A[16x16] * B[16x8] (bf16 in, f32 accumulate), in
// the register layout of PTX's mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16").
// With g = lane / 4 and t = lane % 4, a lane holds
//   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
//   a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]
//   b0   = B[2t, 2t+1][g]      b1   = B[2t+8, 2t+9][g]
//   c[0..1] = D[g][2t, 2t+1]   c[2..3] = D[g+8][2t, 2t+1]
// each u32 two bf16, the lower index in the low half. It is the mma.sync instruction, on sm_80
// and later and under the CUDA emulator (tests/cuda_emu), which executes it as one warp-wide
// step; the kernels that use it are tested there on any machine.
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
#elif defined(NANOVLLM_CUDA_EMU)
  emu::mma_bf16_m16n8k16(c, a, b0, b1);  // the emulator executes the instruction (tests/cuda_emu)
#elif defined(__CUDA_ARCH__)
#error "mma.m16n8k16 with bf16 needs sm_80 or later"
#endif
}

}  // namespace nanovllm::cuda
