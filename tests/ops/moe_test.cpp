// CpuBackend::fused_moe against a scalar reference written from transformers'
// Qwen3MoeSparseMoeBlock (softmax in double, top-k by probability with ties to the lower index,
// optional renormalization, each expert's SwiGLU MLP in double on the dequantized weights, its
// GEMM inputs rounded where the engine's GEMMs round them: bf16 for bf16 weights, the int16 grid
// of scale max|x| / 16383 for int8 ones, int8 codes of scale max|x_group| / 127 in each group for
// int4 ones). Tolerance: 2e-3 of the largest |output|, which a
// bf16 rounding flip of one activation stays under; a wrong expert, weight or row errs by O(1)
// of it. Also: a token's row does not depend on the batch around it (bitwise), which greedy
// batch invariance needs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "reference/ops_reference.h"
#include "runtime/moe_routing.h"
#include "runtime/quant.h"

namespace nanovllm {
namespace {

using Vec = std::vector<float>;

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

struct Expert {
  Vec gate_up;  // dequantized [2I, H]
  Vec down;     // dequantized [H, I]
};

struct Case {
  int64_t T, H, I, E, k;
  bool renormalize;
  QuantScheme quant;
};

class FusedMoe : public ::testing::TestWithParam<Case> {};

// A [n, k] weight of N(0, 1/k) values as the backend's LinearWeight, and its dequantized f32.
LinearWeight make_weight(cpu::CpuBackend& be, int64_t n, int64_t k, QuantScheme quant,
                         std::mt19937& rng, Vec& dequantized) {
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(float(k)));
  std::vector<uint16_t> bits(size_t(n * k));
  for (auto& b : bits) b = f32_to_bf16(d(rng));
  dequantized.resize(bits.size());
  if (!quant.enabled()) {
    for (size_t i = 0; i < bits.size(); ++i) dequantized[i] = bf16_to_f32(bits[i]);
    return be.make_linear_weight(Tensor::contiguous(bits.data(), DType::BF16, {n, k}, DeviceKind::CPU));
  }
  QuantizedWeight q = quantize_rtn(bits.data(), n, k, quant, "expert");
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i) dequantized[size_t(j * k + i)] = q.dequantize(j, i);
  return be.make_quantized_linear_weight(q);
}

Vec matvec(const Vec& w, const Vec& x, int64_t n) {
  const int64_t k = int64_t(x.size());
  Vec y(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t i = 0; i < k; ++i) s += double(w[size_t(j * k + i)]) * x[size_t(i)];
    y[size_t(j)] = float(s);
  }
  return y;
}

TEST_P(FusedMoe, MatchesTheScalarReference) {
  const Case c = GetParam();
  cpu::CpuBackend be(2);
  std::mt19937 rng(uint32_t(c.T * 131 + c.E * 7 + c.k));
  MoeWeights w;
  std::vector<Expert> ref(size_t(c.E));
  for (int64_t e = 0; e < c.E; ++e) {
    w.gate_up.push_back(make_weight(be, 2 * c.I, c.H, c.quant, rng, ref[size_t(e)].gate_up));
    w.down.push_back(make_weight(be, c.H, c.I, c.quant, rng, ref[size_t(e)].down));
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Vec x(static_cast<size_t>(c.T * c.H)), logits(size_t(c.T * c.E)), out(size_t(c.T * c.H));
  for (float& v : x) v = nd(rng);
  for (float& v : logits) v = nd(rng);
  auto in = [&](const Vec& v) {
    if (c.quant.format == QuantFormat::Int4) return ref::round_int8_groups(v, c.quant.group);
    if (c.quant.enabled()) return ref::round_int16_grid(v);
    Vec r = v;
    for (float& f : r) f = round_bf16(f);
    return r;
  };
  be.fused_moe(Tensor::contiguous(out.data(), DType::F32, {c.T, c.H}, DeviceKind::CPU),
               Tensor::contiguous(x.data(), DType::F32, {c.T, c.H}, DeviceKind::CPU),
               Tensor::contiguous(logits.data(), DType::F32, {c.T, c.E}, DeviceKind::CPU), w,
               int(c.k), c.renormalize);
  double max_err = 0, max_out = 0;
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<double> p(static_cast<size_t>(c.E));
    double mx = -1e300, z = 0;
    for (int64_t e = 0; e < c.E; ++e) mx = std::max(mx, double(logits[size_t(t * c.E + e)]));
    for (int64_t e = 0; e < c.E; ++e) z += p[size_t(e)] = std::exp(logits[size_t(t * c.E + e)] - mx);
    std::vector<int64_t> order(static_cast<size_t>(c.E));
    for (int64_t e = 0; e < c.E; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    double picked = 0;
    for (int64_t j = 0; j < c.k; ++j) picked += p[size_t(order[size_t(j)])] / z;
    const Vec xt = in(Vec(x.begin() + t * c.H, x.begin() + (t + 1) * c.H));
    std::vector<double> want(size_t(c.H), 0.0);
    for (int64_t j = 0; j < c.k; ++j) {
      const Expert& ex = ref[size_t(order[size_t(j)])];
      const Vec gu = matvec(ex.gate_up, xt, 2 * c.I);
      Vec act(static_cast<size_t>(c.I));
      for (int64_t i = 0; i < c.I; ++i) {
        const double g = gu[size_t(i)];
        act[size_t(i)] = float(g / (1.0 + std::exp(-g)) * gu[size_t(c.I + i)]);
      }
      const Vec y = matvec(ex.down, in(act), c.H);
      const double wj = p[size_t(order[size_t(j)])] / z / (c.renormalize ? picked : 1.0);
      for (int64_t i = 0; i < c.H; ++i) want[size_t(i)] += wj * y[size_t(i)];
    }
    for (int64_t i = 0; i < c.H; ++i) {
      max_err = std::max(max_err, std::fabs(want[size_t(i)] - out[size_t(t * c.H + i)]));
      max_out = std::max(max_out, std::fabs(want[size_t(i)]));
    }
  }
  EXPECT_LT(max_err, 2e-3 * max_out);
  std::printf("T %ld E %ld k %ld %s: max error / max |out| = %.2e\n", long(c.T), long(c.E),
              long(c.k), quantization_name(c.quant).c_str(), max_err / max_out);

  // Batch invariance: each token alone gives its row of the batch, bit for bit. (A batch with
  // enough active experts runs whole experts per thread, a token alone each of its experts on
  // the whole pool: the two paths must agree to the bit.)
  for (int64_t t = 0; t < c.T; t += std::max<int64_t>(1, c.T / 5)) {
    Vec one(static_cast<size_t>(c.H));
    be.fused_moe(Tensor::contiguous(one.data(), DType::F32, {1, c.H}, DeviceKind::CPU),
                 Tensor::contiguous(x.data() + t * c.H, DType::F32, {1, c.H}, DeviceKind::CPU),
                 Tensor::contiguous(logits.data() + t * c.E, DType::F32, {1, c.E}, DeviceKind::CPU),
                 w, int(c.k), c.renormalize);
    EXPECT_EQ(0, std::memcmp(one.data(), out.data() + t * c.H, size_t(c.H) * 4)) << "token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedMoe,
    ::testing::Values(Case{1, 64, 32, 16, 4, true, {}}, Case{7, 64, 32, 16, 4, true, {}},
                      Case{33, 72, 40, 8, 2, false, {}}, Case{600, 64, 48, 16, 4, true, {}},
                      Case{5, 64, 32, 16, 4, true, {QuantFormat::Int8, 0}},
                      Case{40, 64, 32, 16, 4, true, {QuantFormat::Int8, 0}},
                      Case{40, 64, 64, 8, 2, true, {QuantFormat::Int4, 32}},
                      Case{1, 128, 64, 128, 8, true, {QuantFormat::Int8, 0}}));

TEST(MoeRoute, TopKInOrderRenormalized) {
  const float logits[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  int32_t ids[3];
  float w[3];
  moe_route(logits, 5, 3, false, ids, w);
  EXPECT_EQ(ids[0], 1);  // a tie: the lower index first
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 4);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.0) / z, 1e-6);
  moe_route(logits, 5, 3, true, ids, w);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.0) / (2 * std::exp(2.0) + std::exp(1.0)), 1e-6);
}

}  // namespace
}  // namespace nanovllm
