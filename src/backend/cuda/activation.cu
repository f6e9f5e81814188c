// silu_and_mul: out = silu(x[:, :n]) * x[:, n:], f32 math, bf16 in and out.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

__global__ void silu_and_mul_kernel(uint16_t* out, int64_t out_stride, const uint16_t* x,
                                    int64_t x_stride, int64_t tokens, int64_t n) {
  const int64_t total = tokens * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / n, c = i % n;
    const uint16_t* xr = x + t * x_stride;
    st_bf16(out + t * out_stride + c, silu_mul(ld_bf16(xr + c), ld_bf16(xr + n + c)));
  }
}

// 8 columns per thread when rows and n allow 16-byte access.
__global__ void silu_and_mul_vec_kernel(uint16_t* out, int64_t out_stride, const uint16_t* x,
                                        int64_t x_stride, int64_t tokens, int64_t n) {
  const int64_t chunks = n / 8, total = tokens * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / chunks, c = (i % chunks) * 8;
    const uint16_t* xr = x + t * x_stride;
    float g[8], u[8];
    load8(xr + c, g);
    load8(xr + n + c, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = silu_mul(g[e], u[e]);
    store8(out + t * out_stride + c, g);
  }
}

}  // namespace

void launch_silu_and_mul(uint16_t* out, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                         int64_t tokens, int64_t n, cudaStream_t stream) {
  if (tokens * n == 0) return;
  const bool vec = n % 8 == 0 && x_stride % 8 == 0 && out_stride % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vec) {
    silu_and_mul_vec_kernel<<<unsigned(blocks_for(tokens * n / 8, 256)), 256, 0, stream>>>(
        out, out_stride, x, x_stride, tokens, n);
  } else {
    silu_and_mul_kernel<<<unsigned(blocks_for(tokens * n, 256)), 256, 0, stream>>>(
        out, out_stride, x, x_stride, tokens, n);
  }
  NV_CUDA_CHECK("silu_and_mul", cudaGetLastError());
}

}  // namespace nanovllm::cuda
