// RMSNorm and the fused residual-add RMSNorm, one row at a time, rows split over the pool.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"

#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

namespace {

std::vector<float> weight_f32(const Tensor& w, int64_t d) {
  NV_CHECK(w.ndim == 1 && w.dtype == DType::BF16 && w.shape[0] == d && w.stride[0] == 1,
           "norm weight {} for a last dim of {}", w.describe(), d);
  std::vector<float> out(size_t(d) + 8);
  const uint16_t* p = w.ptr<const uint16_t>();
  for (int64_t i = 0; i < d; ++i) out[size_t(i)] = bf16_to_f32(p[i]);
  return out;
}

float sum_squares(const float* x, int64_t d) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  float s = vec::hsum(_mm256_add_ps(a0, a1));
  for (; i < d; ++i) s += x[i] * x[i];
  return s;
}

// out = x * r * w over one row (out may alias x).
void scale_row(float* out, const float* x, const float* w, float r, int64_t d) {
  const __m256 vr = _mm256_set1_ps(r);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8)
    _mm256_storeu_ps(
        out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vr), _mm256_loadu_ps(w + i)));
  for (; i < d; ++i) out[i] = x[i] * r * w[i];
}

float inv_rms(float sum_sq, int64_t d, float eps) {
  return 1.0f / std::sqrt(sum_sq / float(d) + eps);
}

}  // namespace

// out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
void CpuBackend::rms_norm(Tensor out, Tensor x, Tensor weight, float eps) {
  NV_CHECK((x.ndim == 2 || x.ndim == 3) && x.dtype == DType::F32 && out.dtype == DType::F32 &&
               out.ndim == x.ndim,
           "rms_norm out {} x {}", out.describe(), x.describe());
  for (int dim = 0; dim < x.ndim; ++dim)
    NV_CHECK(out.shape[dim] == x.shape[dim], "rms_norm out {} x {}", out.describe(), x.describe());
  const int last = x.ndim - 1;
  NV_CHECK(x.stride[last] == 1 && out.stride[last] == 1, "rms_norm needs a contiguous last dim");
  const int64_t d = x.shape[last];
  const std::vector<float> w = weight_f32(weight, d);
  const int64_t inner = x.ndim == 3 ? x.shape[1] : 1;  // rows per outer index
  const int64_t rows = x.shape[0] * inner;
  parallel_rows(rows, d, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r / inner, j = r % inner;
      const float* xr =
          x.ptr<const float>() + i * x.stride[0] + (x.ndim == 3 ? j * x.stride[1] : 0);
      float* orow = out.ptr<float>() + i * out.stride[0] + (x.ndim == 3 ? j * out.stride[1] : 0);
      scale_row(orow, xr, w.data(), inv_rms(sum_squares(xr, d), d, eps), d);
    }
  });
}

// residual = x + residual; x = rms_norm(residual) * weight
void CpuBackend::add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) {
  NV_CHECK(x.ndim == 2 && residual.ndim == 2 && x.dtype == DType::F32 &&
               residual.dtype == DType::F32 && x.shape[0] == residual.shape[0] &&
               x.shape[1] == residual.shape[1] && x.is_contiguous() && residual.is_contiguous(),
           "add_rms_norm x {} residual {}", x.describe(), residual.describe());
  const int64_t d = x.shape[1];
  const std::vector<float> w = weight_f32(weight, d);
  parallel_rows(x.shape[0], 2 * d, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* xr = x.ptr<float>() + t * d;
      float* rr = residual.ptr<float>() + t * d;
      int64_t i = 0;
      for (; i + 8 <= d; i += 8)
        _mm256_storeu_ps(rr + i, _mm256_add_ps(_mm256_loadu_ps(xr + i), _mm256_loadu_ps(rr + i)));
      for (; i < d; ++i) rr[i] += xr[i];
      scale_row(xr, rr, w.data(), inv_rms(sum_squares(rr, d), d, eps), d);
    }
  });
}

}  // namespace nanovllm::cpu
