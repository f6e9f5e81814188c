// SiLU-and-multiply of the fused gate/up projection, rows split over the pool.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"

#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

// gate, up = x.chunk(2, -1); out = F.silu(gate) * up
void CpuBackend::silu_and_mul(Tensor out, Tensor x) {
  NV_CHECK(x.ndim == 2 && out.ndim == 2 && x.dtype == DType::F32 && out.dtype == DType::F32 &&
               x.stride[1] == 1 && out.stride[1] == 1 && x.shape[0] == out.shape[0] &&
               x.shape[1] == 2 * out.shape[1],
           "silu_and_mul out {} x {}: expected f32 [T, I] and [T, 2I]", out.describe(),
           x.describe());
  parallel_rows(x.shape[0], 8 * out.shape[1],
                [&](int64_t begin, int64_t end) { silu_and_mul_rows(out, x, begin, end); });
}

void CpuBackend::silu_and_mul_rows(Tensor out, Tensor x, int64_t begin, int64_t end) {
  const int64_t n = out.shape[1];
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t t = begin; t < end; ++t) {
    const float* gate = x.ptr<const float>() + t * x.stride[0];
    const float* up = gate + n;
    float* o = out.ptr<float>() + t * out.stride[0];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 g = _mm256_loadu_ps(gate + i);
      __m256 e = vec::exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
      __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; ++i) o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

}  // namespace nanovllm::cpu
