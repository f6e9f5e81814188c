// bf16 GEMV for one row (batch-1 decode): cuBLASLt is far from bandwidth there. One warp per
// output feature n: each lane streams 16-byte chunks of w[n] (4 in flight), multiplies them with
// the same chunk of x, then the warp sums (the loop is gemv.cuh's, shared with the experts' GEMV
// in moe.cu, which runs it for tiles of up to 16 rows). 2..16 rows run on the tensor cores
// (gemv_mma.cu): this loop's 16-row tile ran at a sixth of its one-row bandwidth on an H200.
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

template <bool kF32Out>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(void* out, int64_t out_stride, const uint16_t* __restrict__ x,
                const uint16_t* __restrict__ w, const uint16_t* __restrict__ bias, int64_t n,
                int64_t k) {
  const int64_t col = int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (col >= n) return;
  float acc[1] = {0.0f};
  gemv_lane_dots<1>(
      acc, w + col * k, [&](int) { return x; }, 1, k, lane);
  gemv_store_rows<1, kF32Out>(out, out_stride, acc, bias, col, 1, lane);
}

}  // namespace

void launch_gemv(void* out, bool out_f32, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                 const uint16_t* w, const uint16_t* bias, int64_t m, int64_t n, int64_t k,
                 cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  if (gemv_uses_mma(m)) {
    launch_gemv_mma(out, out_f32, out_stride, x, x_stride, w, bias, m, n, k, stream);
    return;
  }
  const unsigned grid = unsigned((n + kGemvWarps - 1) / kGemvWarps);
  if (out_f32) {
    gemv_kernel<true><<<grid, kGemvWarps * 32, 0, stream>>>(out, out_stride, x, w, bias, n, k);
  } else {
    gemv_kernel<false><<<grid, kGemvWarps * 32, 0, stream>>>(out, out_stride, x, w, bias, n, k);
  }
  NV_CUDA_CHECK("linear (gemv)", cudaGetLastError());
}

}  // namespace nanovllm::cuda
