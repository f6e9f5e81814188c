// store_kv: this step's keys and values into the paged cache, one thread per 8 elements (or per
// element when rows are not 16-byte aligned); slot -1 writes nothing. A bf16 cache gets the
// values as they are, an fp8 cache the E4M3 code of value / scale (runtime/fp8.h's rounding).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

// Items are (token, kv head, chunk of `vec` elements) of k then of v. C: the cache element.
template <int vec, typename C>
__global__ void store_kv_kernel(Rows k, Rows v, int64_t d, const int32_t* slot_mapping,
                                KVStore cache) {
  const int64_t hkv = k.inner, chunks = d / vec;
  const int64_t per_tensor = k.rows * chunks;  // k.rows = tokens * hkv
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < 2 * per_tensor;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool is_v = i >= per_tensor;
    const int64_t j = is_v ? i - per_tensor : i;
    const int64_t row = j / chunks, c = (j % chunks) * vec;
    const int64_t t = row / hkv, h = row % hkv;
    const int32_t slot = slot_mapping[t];
    if (slot < 0 || slot >= cache.num_slots) continue;
    const Rows& src = is_v ? v : k;
    const uint16_t* s =
        static_cast<const uint16_t*>(src.data) + row_offset(row, hkv, src.stride0, src.stride1) + c;
    C* dst = static_cast<C*>(is_v ? cache.v : cache.k) + slot_offset(slot, hkv * d) + h * d + c;
    if constexpr (sizeof(C) == 2) {
      if constexpr (vec == 8) {
        *reinterpret_cast<uint4*>(dst) = load8_raw(s);
      } else {
        *dst = *s;
      }
    } else {
      const float scale = is_v ? cache.v_scale : cache.k_scale;
      if constexpr (vec == 8) {
        float f[8];
        load8(s, f);
        uint32_t w[2] = {0, 0};
#pragma unroll
        for (int e = 0; e < 8; ++e)
          w[e / 4] |= uint32_t(KvElem<C>::encode(f[e], scale)) << (8 * (e % 4));
        *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
      } else {
        *dst = KvElem<C>::encode(ld_bf16(s), scale);
      }
    }
  }
}

template <int vec, typename C>
void launch(Rows k, Rows v, int64_t d, const int32_t* slot_mapping, KVStore cache,
            cudaStream_t stream) {
  store_kv_kernel<vec, C><<<unsigned(blocks_for(2 * k.rows * d / vec, 256)), 256, 0, stream>>>(
      k, v, d, slot_mapping, cache);
}

}  // namespace

void launch_store_kv(Rows k, Rows v, int64_t d, const int32_t* slot_mapping, KVStore cache,
                     cudaStream_t stream) {
  if (k.rows == 0) return;
  const bool vec = d % 8 == 0 && k.stride0 % 8 == 0 && k.stride1 % 8 == 0 && v.stride0 % 8 == 0 &&
                   v.stride1 % 8 == 0 && reinterpret_cast<uintptr_t>(k.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(v.data) % 16 == 0;
  if (cache.fp8) {
    if (vec)
      launch<8, uint8_t>(k, v, d, slot_mapping, cache, stream);
    else
      launch<1, uint8_t>(k, v, d, slot_mapping, cache, stream);
  } else {
    if (vec)
      launch<8, uint16_t>(k, v, d, slot_mapping, cache, stream);
    else
      launch<1, uint16_t>(k, v, d, slot_mapping, cache, stream);
  }
  NV_CUDA_CHECK("store_kv", cudaGetLastError());
}

}  // namespace nanovllm::cuda
