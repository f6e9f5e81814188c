// bf16 GEMV on the tensor cores for 2..16 rows (decode batches too small for cuBLASLt): the
// CUDA-core GEMV (gemv.cu) multiplies every weight chunk with each x row on the FMA units and ran
// 16 rows at a sixth of the bandwidth it reaches with one. Here one mma.m16n8k16 multiplies a
// 16-row x tile with 8 output features; the weights stream once, as in the GEMV.
//
// A CTA owns 8 output features n0..n0+7 and splits K over its kGemvMmaWarps warps: warp w takes
// the 32-wide k blocks w, w + W, w + 2W, ... Within a block, lane (g = lane / 4, q = lane % 4)
// loads 16 bytes: w[n0 + g][8q .. 8q+7] and x[g][8q .. 8q+7], x[g + 8][...] (zero past M). The
// mma's k order is a permutation of the block's (the same for A and B: mma.cuh's a[0] / b0 take
// elements 8q, 8q+1, a[2] / b1 take 8q+2, 8q+3, and a second mma the upper four), which leaves
// each dot product's terms unchanged. The warps' partial tiles meet in shared memory and are
// summed in warp order. A row's result depends on its x row alone (the mma's rows are
// independent, the k split is fixed), so it is the same for every M of this kernel.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/mma.cuh"

namespace nanovllm::cuda {

namespace {

constexpr int kW = kGemvMmaWarps;
constexpr int kUnroll = 4;  // k blocks in flight per warp

template <bool kF32Out>
__global__ void __launch_bounds__(kW * 32)
    gemv_mma_kernel(void* out, int64_t out_stride, const uint16_t* __restrict__ x, int64_t x_stride,
                    const uint16_t* __restrict__ w, const uint16_t* __restrict__ bias, int m,
                    int64_t n, int64_t k) {
  __shared__ float partial[kW][16][8];  // [warp][row][feature]
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * 8;
  const int64_t chunks = k / 8, blocks = (chunks + 3) / 4;
  const bool has_w = n0 + g < n, has_lo = g < m, has_hi = g + 8 < m;
  const uint4* wr = reinterpret_cast<const uint4*>(w + (n0 + g) * k);
  const uint4* xlo = reinterpret_cast<const uint4*>(x + int64_t(g) * x_stride);
  const uint4* xhi = reinterpret_cast<const uint4*>(x + int64_t(g + 8) * x_stride);
  const uint4 zero = make_uint4(0, 0, 0, 0);

  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b0 = warp; b0 < blocks; b0 += int64_t(kW) * kUnroll) {
    uint4 wv[kUnroll], lo[kUnroll], hi[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load of the round first: 16 bytes each
      const int64_t ch = (b0 + int64_t(u) * kW) * 4 + q;
      const bool in = ch < chunks;
      wv[u] = in && has_w ? __ldg(wr + ch) : zero;
      lo[u] = in && has_lo ? __ldg(xlo + ch) : zero;
      hi[u] = in && has_hi ? __ldg(xhi + ch) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t a0[4] = {lo[u].x, hi[u].x, lo[u].y, hi[u].y};
      mma_bf16_m16n8k16(c, a0, wv[u].x, wv[u].y);
      const uint32_t a1[4] = {lo[u].z, hi[u].z, lo[u].w, hi[u].w};
      mma_bf16_m16n8k16(c, a1, wv[u].z, wv[u].w);
    }
  }
  // c[0..1] = D[g][2q, 2q+1], c[2..3] = D[g+8][2q, 2q+1] (mma.cuh).
  partial[warp][g][2 * q] = c[0];
  partial[warp][g][2 * q + 1] = c[1];
  partial[warp][g + 8][2 * q] = c[2];
  partial[warp][g + 8][2 * q + 1] = c[3];
  __syncthreads();
  const int t = int(threadIdx.x);
  if (t < 16 * 8) {
    const int r = t / 8, j = t % 8;
    const int64_t col = n0 + j;
    if (r < m && col < n) {
      float v = 0.0f;
#pragma unroll
      for (int i = 0; i < kW; ++i) v += partial[i][r][j];
      if (bias) v += ld_bf16(bias + col);
      if constexpr (kF32Out) {
        static_cast<float*>(out)[r * out_stride + col] = v;
      } else {
        st_bf16(static_cast<uint16_t*>(out) + r * out_stride + col, v);
      }
    }
  }
}

}  // namespace

void launch_gemv_mma(void* out, bool out_f32, int64_t out_stride, const uint16_t* x,
                     int64_t x_stride, const uint16_t* w, const uint16_t* bias, int64_t m,
                     int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const unsigned grid = unsigned((n + 7) / 8);
  if (out_f32) {
    gemv_mma_kernel<true>
        <<<grid, kW * 32, 0, stream>>>(out, out_stride, x, x_stride, w, bias, int(m), n, k);
  } else {
    gemv_mma_kernel<false>
        <<<grid, kW * 32, 0, stream>>>(out, out_stride, x, x_stride, w, bias, int(m), n, k);
  }
  NV_CUDA_CHECK("linear (gemv, tensor cores)", cudaGetLastError());
}

}  // namespace nanovllm::cuda
