// Rotate-half (NeoX) rotary position embedding, in place, tokens split over the pool.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"

#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

// x1, x2 = x.chunk(2, -1); x = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)
// with cos, sin = cos_sin[positions].chunk(2, -1) broadcast over heads.
void CpuBackend::rope(Tensor x, Tensor positions, Tensor cos_sin) {
  NV_CHECK(x.ndim == 3 && x.dtype == DType::F32 && x.stride[2] == 1 && x.shape[2] % 2 == 0,
           "rope x {}: expected f32 [T, heads, D] with contiguous heads, even D", x.describe());
  NV_CHECK(positions.ndim == 1 && positions.dtype == DType::I32 && positions.stride[0] == 1 &&
               positions.shape[0] == x.shape[0],
           "rope positions {} for x {}", positions.describe(), x.describe());
  NV_CHECK(cos_sin.ndim == 2 && cos_sin.dtype == DType::F32 && cos_sin.is_contiguous() &&
               cos_sin.shape[1] == x.shape[2],
           "rope cos_sin {} for x {}", cos_sin.describe(), x.describe());
  const int64_t heads = x.shape[1], d = x.shape[2], half = d / 2;
  const int32_t* pos = positions.ptr<const int32_t>();
  parallel_rows(x.shape[0], heads * d, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      NV_CHECK(pos[t] >= 0 && pos[t] < cos_sin.shape[0], "rope position {} outside [0, {})", pos[t],
               cos_sin.shape[0]);
      const float* cs = cos_sin.ptr<const float>() + int64_t(pos[t]) * d;
      const float* sn = cs + half;
      for (int64_t h = 0; h < heads; ++h) {
        float* x1 = x.ptr<float>() + t * x.stride[0] + h * x.stride[1];
        float* x2 = x1 + half;
        int64_t i = 0;
        for (; i + 8 <= half; i += 8) {
          __m256 a = _mm256_loadu_ps(x1 + i), b = _mm256_loadu_ps(x2 + i);
          __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
          _mm256_storeu_ps(x1 + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
          _mm256_storeu_ps(x2 + i, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
        }
        for (; i < half; ++i) {
          const float a = x1[i], b = x2[i];
          x1[i] = a * cs[i] - b * sn[i];
          x2[i] = b * cs[i] + a * sn[i];
        }
      }
    }
  });
}

}  // namespace nanovllm::cpu
