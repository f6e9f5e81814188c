// store_kv: this step's keys and values into the paged bf16 cache, one thread per 8 elements
// (or per element when rows are not 16-byte aligned); slot -1 writes nothing.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

// Items are (token, kv head, chunk of `vec` elements) of k then of v.
template <int vec>
__global__ void store_kv_kernel(Rows k, Rows v, int64_t d, const int32_t* slot_mapping,
                                uint16_t* k_cache, uint16_t* v_cache, int64_t num_slots) {
  const int64_t hkv = k.inner, chunks = d / vec;
  const int64_t per_tensor = k.rows * chunks;  // k.rows = tokens * hkv
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < 2 * per_tensor;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool is_v = i >= per_tensor;
    const int64_t j = is_v ? i - per_tensor : i;
    const int64_t row = j / chunks, c = (j % chunks) * vec;
    const int64_t t = row / hkv, h = row % hkv;
    const int32_t slot = slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;
    const Rows& src = is_v ? v : k;
    const uint16_t* s =
        static_cast<const uint16_t*>(src.data) + row_offset(row, hkv, src.stride0, src.stride1) + c;
    uint16_t* dst = (is_v ? v_cache : k_cache) + slot_offset(slot, hkv * d) + h * d + c;
    if constexpr (vec == 8) {
      *reinterpret_cast<uint4*>(dst) = load8_raw(s);
    } else {
      *dst = *s;
    }
  }
}

}  // namespace

void launch_store_kv(Rows k, Rows v, int64_t d, const int32_t* slot_mapping, uint16_t* k_cache,
                     uint16_t* v_cache, int64_t num_slots, cudaStream_t stream) {
  if (k.rows == 0) return;
  const bool vec = d % 8 == 0 && k.stride0 % 8 == 0 && k.stride1 % 8 == 0 && v.stride0 % 8 == 0 &&
                   v.stride1 % 8 == 0 && reinterpret_cast<uintptr_t>(k.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(v.data) % 16 == 0;
  if (vec) {
    store_kv_kernel<8><<<unsigned(blocks_for(2 * k.rows * d / 8, 256)), 256, 0, stream>>>(
        k, v, d, slot_mapping, k_cache, v_cache, num_slots);
  } else {
    store_kv_kernel<1><<<unsigned(blocks_for(2 * k.rows * d, 256)), 256, 0, stream>>>(
        k, v, d, slot_mapping, k_cache, v_cache, num_slots);
  }
  NV_CUDA_CHECK("store_kv", cudaGetLastError());
}

}  // namespace nanovllm::cuda
