// Rotate-half RoPE in place, and the fused q/k-norm + RoPE + store_kv of one attention layer.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

// One thread per (row, pair i < d/2); rows are (token, head). A position outside the table
// leaves the row as it is (the engine never sends one).
__global__ void rope_kernel(Rows x, const int32_t* positions, const float* cos_sin, int64_t max_pos,
                            int64_t d) {
  const int64_t half = d / 2, total = x.rows * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / half, j = i % half;
    const int32_t pos = positions[row / x.inner];
    if (pos < 0 || pos >= max_pos) continue;
    uint16_t* p = static_cast<uint16_t*>(x.data) + row_offset(row, x.inner, x.stride0, x.stride1);
    const float* cs = cos_sin + int64_t(pos) * d;
    const RotatedPair r = rope_rotate(ld_bf16(p + j), ld_bf16(p + j + half), cs[j], cs[half + j]);
    st_bf16(p + j, r.x1);
    st_bf16(p + j + half, r.x2);
  }
}

constexpr int kFusedWarps = kRowThreads / 32;
constexpr int kFusedMaxD = kFusedMaxHeadDim;

// One warp per (token, head) over the q heads, then the k heads, then the v heads of a token.
// q and k: rms_norm (rounded to bf16, exactly as the separate rms_norm kernel writes it), then
// RoPE (as rope_kernel), written in place; k and v then stored at the token's slot as store_kv
// stores them (C: the cache element, bf16 bits or E4M3 codes).
template <typename C>
__global__ void qk_norm_rope_store_kernel(Rows q, Rows k, Rows v, const uint16_t* q_norm,
                                          const uint16_t* k_norm, float eps,
                                          const int32_t* positions, const float* cos_sin,
                                          int64_t max_pos, int64_t d, const int32_t* slot_mapping,
                                          KVStore cache) {
  __shared__ float buf[kFusedWarps][kFusedMaxD];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hq = q.inner, hkv = k.inner, heads = hq + 2 * hkv;
  const int64_t item = int64_t(blockIdx.x) * kFusedWarps + warp;
  if (item >= q.rows / hq * heads) return;
  const int64_t t = item / heads, h = item % heads;
  const int32_t slot = slot_mapping[t];
  const bool store = slot >= 0 && slot < cache.num_slots;
  // A bf16 cache takes the bits as they are; fp8 the code of value / scale.
  const auto put = [](C* dst, uint16_t bits, float scale) {
    if constexpr (sizeof(C) == 2) {
      *dst = bits;
    } else {
      *dst = KvElem<C>::encode(bf16_bits_to_f32(bits), scale);
    }
  };
  if (h >= hq + hkv) {  // v: store only
    if (!store) return;
    const int64_t hv = h - hq - hkv;
    const uint16_t* s = static_cast<const uint16_t*>(v.data) + t * v.stride0 + hv * v.stride1;
    C* dst = static_cast<C*>(cache.v) + slot_offset(slot, hkv * d) + hv * d;
    for (int64_t i = lane; i < d; i += 32) put(dst + i, s[i], cache.v_scale);
    return;
  }
  const bool is_q = h < hq;
  const Rows& x = is_q ? q : k;
  const int64_t hh = is_q ? h : h - hq;
  const uint16_t* norm = is_q ? q_norm : k_norm;
  uint16_t* p = static_cast<uint16_t*>(x.data) + t * x.stride0 + hh * x.stride1;
  float* b = buf[warp];
  for (int64_t i = lane; i < d; i += 32) b[i] = ld_bf16(p + i);
  if (norm) {
    // The same summation order and expressions as rms_norm_kernel (norm.cu): equal bits.
    const bool vec = d % 8 == 0 && aligned16(p) && aligned16(norm);
    const float inv = rsqrtf(warp_sum(row_sum_squares(p, d, vec, lane)) / float(d) + eps);
    for (int64_t i = lane; i < d; i += 32)
      b[i] = bf16_bits_to_f32(f32_to_bf16_bits(b[i] * inv * ld_bf16(norm + i)));
  }
  __syncwarp();
  const int32_t pos = positions[t];
  const int64_t half = d / 2;
  C* dst =
      store && !is_q ? static_cast<C*>(cache.k) + slot_offset(slot, hkv * d) + hh * d : nullptr;
  for (int64_t j = lane; j < half; j += 32) {
    float y1 = b[j], y2 = b[j + half];
    if (pos >= 0 && pos < max_pos) {
      const float* cs = cos_sin + int64_t(pos) * d;
      const RotatedPair r = rope_rotate(y1, y2, cs[j], cs[half + j]);
      y1 = r.x1;
      y2 = r.x2;
    }
    const uint16_t a = f32_to_bf16_bits(y1), c = f32_to_bf16_bits(y2);
    p[j] = a;
    p[j + half] = c;
    if (dst) {
      put(dst + j, a, cache.k_scale);
      put(dst + j + half, c, cache.k_scale);
    }
  }
}

}  // namespace

void launch_rope(Rows x, const int32_t* positions, const float* cos_sin, int64_t max_pos, int64_t d,
                 cudaStream_t stream) {
  if (x.rows == 0) return;
  rope_kernel<<<unsigned(blocks_for(x.rows * d / 2, 256)), 256, 0, stream>>>(x, positions, cos_sin,
                                                                             max_pos, d);
  NV_CUDA_CHECK("rope", cudaGetLastError());
}

void launch_qk_norm_rope_store(Rows q, Rows k, Rows v, const uint16_t* q_norm,
                               const uint16_t* k_norm, float eps, const int32_t* positions,
                               const float* cos_sin, int64_t max_pos, int64_t d,
                               const int32_t* slot_mapping, KVStore cache, cudaStream_t stream) {
  if (q.rows == 0) return;
  const int64_t items = q.rows / q.inner * (q.inner + 2 * k.inner);
  const unsigned blocks = unsigned((items + kFusedWarps - 1) / kFusedWarps);
  if (cache.fp8) {
    qk_norm_rope_store_kernel<uint8_t><<<blocks, kRowThreads, 0, stream>>>(
        q, k, v, q_norm, k_norm, eps, positions, cos_sin, max_pos, d, slot_mapping, cache);
  } else {
    qk_norm_rope_store_kernel<uint16_t><<<blocks, kRowThreads, 0, stream>>>(
        q, k, v, q_norm, k_norm, eps, positions, cos_sin, max_pos, d, slot_mapping, cache);
  }
  NV_CUDA_CHECK("qk_norm_rope_store_kv", cudaGetLastError());
}

}  // namespace nanovllm::cuda
