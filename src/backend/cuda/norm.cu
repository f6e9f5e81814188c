// RMSNorm and the fused residual add + RMSNorm: one warp per row, f32 sums, bf16 in and out.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

constexpr int kWarpsPerBlock = kRowThreads / 32;

// out = x * rsqrt(mean(x^2) + eps) * weight   (x and out may alias: each lane rewrites only the
// elements it read, after the warp's sum is complete).
__global__ void rms_norm_kernel(Rows out, Rows x, const uint16_t* weight, int64_t d, float eps) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= x.rows) return;
  const uint16_t* xr =
      static_cast<const uint16_t*>(x.data) + row_offset(r, x.inner, x.stride0, x.stride1);
  uint16_t* orow =
      static_cast<uint16_t*>(out.data) + row_offset(r, out.inner, out.stride0, out.stride1);
  const bool vec = d % 8 == 0 && aligned16(xr) && aligned16(orow) && aligned16(weight);
  const float ss = row_sum_squares(xr, d, vec, lane);
  const float inv = rsqrtf(warp_sum(ss) / float(d) + eps);
  if (vec) {
    for (int64_t i = lane * 8; i < d; i += 32 * 8) {
      float f[8], w[8];
      load8(xr + i, f);
      load8(weight + i, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = f[e] * inv * w[e];
      store8(orow + i, f);
    }
  } else {
    for (int64_t i = lane; i < d; i += 32)
      st_bf16(orow + i, ld_bf16(xr + i) * inv * ld_bf16(weight + i));
  }
}

// residual = bf16(x + residual); x = rms_norm(residual) * weight.
constexpr int kAddNormRegChunks = 8;  // 8 elements a chunk, 32 lanes
__global__ void add_rms_norm_kernel(uint16_t* x, int64_t x_stride, uint16_t* residual,
                                    int64_t r_stride, int64_t rows, const uint16_t* weight,
                                    int64_t d, float eps) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  uint16_t* xr = x + r * x_stride;
  uint16_t* rr = residual + r * r_stride;
  const bool vec = d % 8 == 0 && aligned16(xr) && aligned16(rr) && aligned16(weight);
  float ss = 0.0f;
  if (vec && d <= kAddNormRegChunks * 32 * 8) {
    // Rows up to 2,048 wide: every 16-byte load of the row issued before the first sum, and the
    // rounded sums kept in registers (as bf16) for the second pass. A warp streaming its row
    // chunk by chunk waited on each load in turn (6 us for 128 rows of 1,024 on an H200). Same
    // arithmetic in the same order as the loop below.
    uint4 xa[kAddNormRegChunks], ra[kAddNormRegChunks], wa[kAddNormRegChunks];
#pragma unroll
    for (int c = 0; c < kAddNormRegChunks; ++c) {
      const int64_t i = lane * 8 + c * 32 * 8;
      if (i < d) {
        xa[c] = load8_raw(xr + i);
        ra[c] = load8_raw(rr + i);
        wa[c] = load8_raw(weight + i);
      }
    }
#pragma unroll
    for (int c = 0; c < kAddNormRegChunks; ++c) {
      const int64_t i = lane * 8 + c * 32 * 8;
      if (i < d) {
        float f[8], g[8];
        unpack8(xa[c], f);
        unpack8(ra[c], g);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          f[e] = bf16_bits_to_f32(f32_to_bf16_bits(f[e] + g[e]));
          ss += f[e] * f[e];
        }
        ra[c] = pack8(f);  // the rounded sums, kept as the bits stored
        *reinterpret_cast<uint4*>(rr + i) = ra[c];
      }
    }
    const float inv = rsqrtf(warp_sum(ss) / float(d) + eps);
#pragma unroll
    for (int c = 0; c < kAddNormRegChunks; ++c) {
      const int64_t i = lane * 8 + c * 32 * 8;
      if (i < d) {
        float f[8], w[8];
        unpack8(ra[c], f);
        unpack8(wa[c], w);
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = f[e] * inv * w[e];
        store8(xr + i, f);
      }
    }
    return;
  }
  if (vec) {
    for (int64_t i = lane * 8; i < d; i += 32 * 8) {
      float a[8], b[8];
      load8(xr + i, a);
      load8(rr + i, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        a[e] = bf16_bits_to_f32(f32_to_bf16_bits(a[e] + b[e]));
        ss += a[e] * a[e];
      }
      store8(rr + i, a);
    }
  } else {
    for (int64_t i = lane; i < d; i += 32) {
      const float s = bf16_bits_to_f32(f32_to_bf16_bits(ld_bf16(xr + i) + ld_bf16(rr + i)));
      rr[i] = f32_to_bf16_bits(s);
      ss += s * s;
    }
  }
  const float inv = rsqrtf(warp_sum(ss) / float(d) + eps);
  // Each lane reads back the residual elements it wrote itself.
  if (vec) {
    for (int64_t i = lane * 8; i < d; i += 32 * 8) {
      float f[8], w[8];
      load8(rr + i, f);
      load8(weight + i, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = f[e] * inv * w[e];
      store8(xr + i, f);
    }
  } else {
    for (int64_t i = lane; i < d; i += 32)
      st_bf16(xr + i, ld_bf16(rr + i) * inv * ld_bf16(weight + i));
  }
}

}  // namespace

void launch_rms_norm(Rows out, Rows x, const uint16_t* weight, int64_t d, float eps,
                     cudaStream_t stream) {
  if (x.rows == 0) return;
  rms_norm_kernel<<<unsigned((x.rows + kWarpsPerBlock - 1) / kWarpsPerBlock), kRowThreads, 0,
                    stream>>>(out, x, weight, d, eps);
  NV_CUDA_CHECK("rms_norm", cudaGetLastError());
}

void launch_add_rms_norm(uint16_t* x, int64_t x_stride, uint16_t* residual, int64_t r_stride,
                         int64_t rows, const uint16_t* weight, int64_t d, float eps,
                         cudaStream_t stream) {
  if (rows == 0) return;
  add_rms_norm_kernel<<<unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), kRowThreads, 0,
                        stream>>>(x, x_stride, residual, r_stride, rows, weight, d, eps);
  NV_CUDA_CHECK("add_rms_norm", cudaGetLastError());
}

}  // namespace nanovllm::cuda
