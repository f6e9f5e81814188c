#pragma once
// Device helpers shared by the kernels: warp reductions, 16-byte bf16 loads/stores, and the KV
// cache's element types (bf16, or fp8 E4M3 codes) behind one interface.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.h"
#include "runtime/fp8.h"

namespace nanovllm::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over aligned groups of `width` lanes (width a power of 2 <= 32).
template <int width>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 8 bf16 (16 bytes, aligned) <-> 8 f32.
__device__ __forceinline__ void load8(const uint16_t* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = bits_f32(w[i] << 16);
    f[2 * i + 1] = bits_f32(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 load8_raw(const uint16_t* p) {
  return *reinterpret_cast<const uint4*>(p);
}

__device__ __forceinline__ void unpack8(uint4 u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = bits_f32(w[i] << 16);
    f[2 * i + 1] = bits_f32(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack8(const float* f) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = uint32_t(f32_to_bf16_bits(f[2 * i])) | (uint32_t(f32_to_bf16_bits(f[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void store8(uint16_t* p, const float* f) {
  *reinterpret_cast<uint4*>(p) = pack8(f);
}

// 4 E4M3 codes (byte j of w = element j) -> 4 f32, exactly (runtime/fp8.h's values; E4M3 -> f16
// is lossless). sm_89 and later convert two codes per instruction (cvt.rn.f16x2.e4m3x2).
__device__ __forceinline__ void unpack4_fp8(uint32_t w, float* f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const float2 lo = __half22float2(
      __half2(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w & 0xffffu), __NV_E4M3)));
  const float2 hi =
      __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w >> 16), __NV_E4M3)));
  f[0] = lo.x;
  f[1] = lo.y;
  f[2] = hi.x;
  f[3] = hi.y;
#else
#pragma unroll
  for (int j = 0; j < 4; ++j) f[j] = fp8_e4m3_to_float(uint8_t(w >> (8 * j)));
#endif
}

// 8 E4M3 codes (8 bytes, byte i = element i) -> 8 f32.
__device__ __forceinline__ void unpack8_fp8(uint2 u, float* f) {
  unpack4_fp8(u.x, f);
  unpack4_fp8(u.y, f + 4);
}

// A KV cache element type: C = uint16_t (bf16 bits) or uint8_t (E4M3 code of x / scale). Raw is
// 8 elements as loaded (16 or 8 bytes); unpack gives their values (codes for fp8: the caller
// applies the scale); encode writes one value (a bf16, as f32) divided by the scale.
template <typename C>
struct KvElem;

template <>
struct KvElem<uint16_t> {
  using Raw = uint4;
  __device__ __forceinline__ static Raw load(const uint16_t* p) { return load8_raw(p); }
  __device__ __forceinline__ static Raw zero() { return make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ static void unpack(Raw r, float* f) { unpack8(r, f); }
  __device__ __forceinline__ static uint16_t encode(float x, float /*scale*/) {
    return f32_to_bf16_bits(x);
  }
};

template <>
struct KvElem<uint8_t> {
  using Raw = uint2;
  __device__ __forceinline__ static Raw load(const uint8_t* p) {
    return *reinterpret_cast<const uint2*>(p);
  }
  __device__ __forceinline__ static Raw zero() { return make_uint2(0, 0); }
  __device__ __forceinline__ static void unpack(Raw r, float* f) { unpack8_fp8(r, f); }
  __device__ __forceinline__ static uint8_t encode(float x, float scale) {
    return float_to_fp8_e4m3(x / scale);
  }
};

__device__ __forceinline__ float ld_bf16(const uint16_t* p) { return bf16_bits_to_f32(*p); }
__device__ __forceinline__ void st_bf16(uint16_t* p, float f) { *p = f32_to_bf16_bits(f); }

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// dst[0, n) = src[0, n) by the threads of a CTA (16-byte chunks when both allow).
__device__ __forceinline__ void copy_row_u16(uint16_t* dst, const uint16_t* src, int64_t n) {
  if (aligned16(dst) && aligned16(src) && n % 8 == 0) {
    for (int64_t i = threadIdx.x; i < n / 8; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
}

// Sum of squares of a row of d bf16 values, lane's share (callers warp_sum it): 8-element chunks
// when `vec`, else lane-strided elements. RMSNorm and the fused q/k-norm use this one order.
__device__ __forceinline__ float row_sum_squares(const uint16_t* x, int64_t d, bool vec, int lane) {
  float ss = 0.0f;
  if (vec) {
    for (int64_t i = lane * 8; i < d; i += 32 * 8) {
      float f[8];
      load8(x + i, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += f[e] * f[e];
    }
  } else {
    for (int64_t i = lane; i < d; i += 32) {
      const float f = ld_bf16(x + i);
      ss += f * f;
    }
  }
  return ss;
}

inline constexpr float kLog2e = 1.4426950408889634f;  // scores in log2 units: exp2 for exp

// The first key the query at `position` attends to under a sliding window of `window` keys
// (PagedKV::sliding_window: keys (position - window, position]); 0 without one.
__device__ __forceinline__ int window_first_key(int position, int window) {
  return window > 0 && position >= window ? position - window + 1 : 0;
}

// 8 cache elements as 8 bf16 (16 bytes): bf16 as they are, E4M3 codes converted exactly (every
// E4M3 value is a bf16, so dropping the low half of its f32 is exact).
__device__ __forceinline__ uint4 kv_as_bf16x8(uint4 raw) { return raw; }
__device__ __forceinline__ uint4 kv_as_bf16x8(uint2 raw) {
  float f[8];
  unpack8_fp8(raw, f);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = (f32_bits(f[2 * i]) >> 16) | (f32_bits(f[2 * i + 1]) & 0xffff0000u);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The attention launchers' dispatch on the head dim (attention_head_dim_supported, launch.h):
// f(std::integral_constant<int, D>{}) for d = 16, 32, 64, 128, and MaxD for any other d (the
// callers' checks admit only those).
template <int MaxD, typename F>
void with_head_dim(int64_t d, F&& f) {
  switch (d) {
    case 16:
      f(std::integral_constant<int, 16>{});
      return;
    case 32:
      f(std::integral_constant<int, 32>{});
      return;
    case 64:
      f(std::integral_constant<int, 64>{});
      return;
    case 128:
      f(std::integral_constant<int, 128>{});
      return;
  }
  f(std::integral_constant<int, MaxD>{});
}

}  // namespace nanovllm::cuda
