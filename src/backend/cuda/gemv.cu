// bf16 GEMV for small M (1..16 rows, decode): cuBLASLt is far from bandwidth there. One warp
// per output feature n: each lane streams 16-byte chunks of w[n] (4 in flight), multiplies them
// with the same chunk of every x row (read through L1: all warps of a CTA share them), then the
// warp sums each row (the loop is gemv.cuh's, shared with the experts' GEMV in moe.cu). Row m's
// result is the same for every M: same lanes, same order.
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

template <int MT, bool kF32Out>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(void* out, int64_t out_stride, const uint16_t* __restrict__ x, int64_t x_stride,
                const uint16_t* __restrict__ w, const uint16_t* __restrict__ bias, int m, int64_t n,
                int64_t k) {
  const int64_t col = int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (col >= n) return;
  const uint16_t* wr = w + col * k;
  float acc[MT];
#pragma unroll
  for (int r = 0; r < MT; ++r) acc[r] = 0.0f;
  const auto x_row = [&](int r) { return x + r * x_stride; };
  gemv_lane_dots<MT>(acc, wr, x_row, m, k, lane);
  gemv_store_rows<MT, kF32Out>(out, out_stride, acc, bias, col, m, lane);
}

template <int MT>
void launch_mt(void* out, bool out_f32, int64_t out_stride, const uint16_t* x, int64_t x_stride,
               const uint16_t* w, const uint16_t* bias, int64_t m, int64_t n, int64_t k,
               cudaStream_t stream) {
  const unsigned grid = unsigned((n + kGemvWarps - 1) / kGemvWarps);
  if (out_f32) {
    gemv_kernel<MT, true>
        <<<grid, kGemvWarps * 32, 0, stream>>>(out, out_stride, x, x_stride, w, bias, int(m), n, k);
  } else {
    gemv_kernel<MT, false>
        <<<grid, kGemvWarps * 32, 0, stream>>>(out, out_stride, x, x_stride, w, bias, int(m), n, k);
  }
}

}  // namespace

void launch_gemv(void* out, bool out_f32, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                 const uint16_t* w, const uint16_t* bias, int64_t m, int64_t n, int64_t k,
                 cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  switch (gemv_m_tile(m)) {
    case 1:
      launch_mt<1>(out, out_f32, out_stride, x, x_stride, w, bias, m, n, k, stream);
      break;
    case 2:
      launch_mt<2>(out, out_f32, out_stride, x, x_stride, w, bias, m, n, k, stream);
      break;
    case 4:
      launch_mt<4>(out, out_f32, out_stride, x, x_stride, w, bias, m, n, k, stream);
      break;
    case 8:
      launch_mt<8>(out, out_f32, out_stride, x, x_stride, w, bias, m, n, k, stream);
      break;
    default:
      launch_mt<16>(out, out_f32, out_stride, x, x_stride, w, bias, m, n, k, stream);
      break;
  }
  NV_CUDA_CHECK("linear (gemv)", cudaGetLastError());
}

}  // namespace nanovllm::cuda
