// CpuBackend::store_kv: this step's keys and values into the paged bf16 or fp8 KV cache (fp8:
// the E4M3 code of x / scale, runtime/fp8.h).
#include <vector>

#include "backend/cpu/attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"
#include "runtime/fp8.h"

#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

using attention_detail::check_cache;

// cache.k.view(-1, Hkv, D)[slot_mapping[t]] = k[t] (as bf16, or fp8(k[t] / k_scale)), likewise
// v; slot -1: skipped
void CpuBackend::store_kv(Tensor k, Tensor v, const LayerKVCache& cache,
                          const ForwardBatch& batch) {
  check_cache(cache);
  NV_CHECK(batch.host != nullptr, "the CPU backend reads ForwardBatch::host");
  const std::vector<int32_t>& slots = batch.host->slot_mapping;
  const int64_t hkv = cache.k.shape[2], d = cache.k.shape[3];
  const int64_t num_slots = cache.k.shape[0] * cache.k.shape[1];
  for (const Tensor* t : {&k, &v})
    NV_CHECK(t->ndim == 3 && t->dtype == DType::F32 && t->stride[2] == 1 && t->shape[1] == hkv &&
                 t->shape[2] == d && t->shape[0] == int64_t(slots.size()),
             "store_kv {} for {} slots into a cache of {}", t->describe(), slots.size(),
             cache.k.describe());
  if (cache.k.dtype == DType::F8E4M3) {
    parallel_rows(k.shape[0], 2 * hkv * d, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t slot = slots[size_t(t)];
        if (slot == -1) continue;
        NV_CHECK(slot >= 0 && slot < num_slots, "slot {} of {} at token {}", slot, num_slots, t);
        for (int kv = 0; kv < 2; ++kv) {
          const Tensor& src = kv == 0 ? k : v;
          const float scale = kv == 0 ? cache.k_scale : cache.v_scale;
          uint8_t* dst = (kv == 0 ? cache.k : cache.v).ptr<uint8_t>() + slot * hkv * d;
          for (int64_t h = 0; h < hkv; ++h) {
            const float* x = src.ptr<const float>() + t * src.stride[0] + h * src.stride[1];
            for (int64_t i = 0; i < d; ++i) dst[h * d + i] = float_to_fp8_e4m3(x[i] / scale);
          }
        }
      }
    });
    return;
  }
  parallel_rows(k.shape[0], 2 * hkv * d, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = slots[size_t(t)];
      if (slot == -1) continue;
      NV_CHECK(slot >= 0 && slot < num_slots, "slot {} of {} at token {}", slot, num_slots, t);
      for (int kv = 0; kv < 2; ++kv) {
        const Tensor& src = kv == 0 ? k : v;
        uint16_t* dst = (kv == 0 ? cache.k : cache.v).ptr<uint16_t>() + slot * hkv * d;
        for (int64_t h = 0; h < hkv; ++h) {
          const float* x = src.ptr<const float>() + t * src.stride[0] + h * src.stride[1];
          uint16_t* y = dst + h * d;
          int64_t i = 0;
          for (; i + 8 <= d; i += 8) vec::store_bf16(y + i, _mm256_loadu_ps(x + i));
          for (; i < d; ++i) y[i] = f32_to_bf16(x[i]);
        }
      }
    }
  });
}

}  // namespace nanovllm::cpu
