#include "reference/gemm_reference.h"

#include <cmath>

#include "runtime/tensor.h"

namespace nanovllm::ref {

namespace {

template <bool kAbs>
void linear_impl(float* out, int64_t ldo, const float* x, int64_t ldx, const uint16_t* w,
                 const uint16_t* bias, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        double prod =
            double(bf16_to_f32(f32_to_bf16(x[i * ldx + p]))) * double(bf16_to_f32(w[j * k + p]));
        acc += kAbs ? std::fabs(prod) : prod;
      }
      if (bias) {
        double b = bf16_to_f32(bias[j]);
        acc += kAbs ? std::fabs(b) : b;
      }
      out[i * ldo + j] = float(acc);
    }
  }
}

}  // namespace

void linear(float* out, int64_t ldo, const float* x, int64_t ldx, const uint16_t* w,
            const uint16_t* bias, int64_t m, int64_t n, int64_t k) {
  linear_impl<false>(out, ldo, x, ldx, w, bias, m, n, k);
}

void linear_abs(float* abs_out, int64_t ldo, const float* x, int64_t ldx, const uint16_t* w,
                const uint16_t* bias, int64_t m, int64_t n, int64_t k) {
  linear_impl<true>(abs_out, ldo, x, ldx, w, bias, m, n, k);
}

}  // namespace nanovllm::ref
