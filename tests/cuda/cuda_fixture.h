#pragma once
// Shared by the CUDA op tests: a CudaBackend from the registry (a machine without a GPU fails
// the test with the registry's message), tensors uploaded from host vectors, NaN-poisoned
// outputs, and the magnitude-scaled comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "reference/ops_reference.h"

namespace nanovllm::test {

using ref::Vec;

inline Vec random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) {
    do x = dist(rng);
    while (x == 0.0f);
  }
  return v;
}

inline Vec random_bf16(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  return ref::round_bf16(random_vec(rng, n, lo, hi));
}

// max |got - want| <= rel * max(1, max |want|), reporting the first offenders; NaN fails.
inline void expect_close_scaled(const Vec& got, const Vec& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  const double tol = rel * scale;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(double(got[i]) - double(want[i])) <= tol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (tol "
                      << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BackendOptions o;
    o.device = "cuda";
    try {
      be = make_backend(o);
    } catch (const std::exception& e) {
      FAIL() << "these tests need an NVIDIA GPU (sm_80+) and a CUDA build: " << e.what();
    }
  }

  // A device tensor holding `bytes` bytes of 0xff (NaN in bf16 and f32; -1 in i32).
  Tensor poisoned(DType dt, std::initializer_list<int64_t> shape) {
    Tensor t = alloc(dt, shape);
    std::vector<unsigned char> ff(t.nbytes(), 0xff);
    be->upload(t, ff.data());
    return t;
  }
  Tensor alloc(DType dt, std::initializer_list<int64_t> shape) {
    Tensor probe = Tensor::contiguous(nullptr, dt, shape, DeviceKind::CUDA);
    bufs.push_back(be->alloc(probe.nbytes()));
    probe.data = bufs.back().data();
    return probe;
  }
  Tensor bf16(const Vec& v, std::initializer_list<int64_t> shape) {
    Tensor t = alloc(DType::BF16, shape);
    EXPECT_EQ(size_t(t.numel()), v.size());
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
    be->upload(t, h.data());
    return t;
  }
  Tensor f32(const Vec& v, std::initializer_list<int64_t> shape) {
    Tensor t = alloc(DType::F32, shape);
    be->upload(t, v.data());
    return t;
  }
  template <typename T>
  Tensor ints(const std::vector<T>& v, DType dt) {
    Tensor t = alloc(dt, {int64_t(v.size())});
    be->upload(t, v.data());
    return t;
  }
  // A contiguous bf16 or f32 device tensor as floats.
  Vec get(const Tensor& t) {
    Vec out(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::F32) {
      be->download(out.data(), t);
    } else {
      std::vector<uint16_t> h(out.size());
      be->download(h.data(), t);
      for (size_t i = 0; i < h.size(); ++i) out[i] = bf16_to_f32(h[i]);
    }
    return out;
  }
  std::vector<int32_t> get_i32(const Tensor& t) {
    std::vector<int32_t> out(static_cast<size_t>(t.numel()));
    be->download(out.data(), t);
    return out;
  }

  std::unique_ptr<Backend> be;
  std::vector<Buffer> bufs;
  std::mt19937 rng{4321};
};

}  // namespace nanovllm::test
