// CudaBackend::fused_moe against a scalar reference written from the math (transformers'
// Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock): softmax over the router logits in double, the
// top k by logit (ties: the lower index), optionally renormalized, and each chosen expert's
// SwiGLU MLP in double on the bf16 weights and the bf16 input. The device rounds the expert
// GEMMs' outputs, the activation and the result to bf16, so the tolerance is 2e-2 of
// max(1, max |out|) (about five bf16 half-ulps of the largest output); a wrong expert, weight or
// row errs by O(1) of it. Shapes cover both grouped GEMMs (the GEMV for decode-sized steps, the
// tiled kernel past 16 rows per expert on average), K tails, exact ties in the logits, and
// Qwen3-30B-A3B's router (128 experts, top 8) at a small hidden size. Also: a token's row does
// not depend on the batch around it (bitwise) as long as both batches take the same GEMM path
// (launch.h moe_use_tiled; across the paths the rows differ by rounding only), and a captured
// graph replays any routing, a skewed one included. Quantized experts (int8 per row or per group,
// int4 in groups, as --quantization makes them: quantize_rtn of bf16 weights) the same on both
// paths, against the reference on their dequantized values (QuantizedWeight::dequantize), with
// K tails and a partial last group. Needs a GPU (label cuda) or the emulator.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>

#include "backend/cuda/launch.h"
#include "cuda/cuda_fixture.h"
#include "runtime/quant.h"

namespace nanovllm {
namespace {

using ref::Vec;
using test::expect_close_scaled;

struct Case {
  int64_t T, H, I, E, k;
  bool renormalize;
  bool tied_logits = false;  // logits on a coarse grid: many exact ties
  QuantScheme quant = {};    // the experts' format (None: bf16)
};

constexpr QuantScheme kInt8{QuantFormat::Int8, 0};
constexpr QuantScheme kInt8G32{QuantFormat::Int8, 32};
constexpr QuantScheme kInt4G32{QuantFormat::Int4, 32};

// Test names (CTest lists the parameter): "T40 H64 I32 E16 k4 renorm tied".
void PrintTo(const Case& c, std::ostream* os) {
  *os << "T" << c.T << " H" << c.H << " I" << c.I << " E" << c.E << " k" << c.k
      << (c.renormalize ? " renorm" : "") << (c.tied_logits ? " tied" : "");
  if (c.quant.enabled()) *os << " " << quantization_name(c.quant);
}

// The experts of one layer: device weights and their f32 values.
struct Experts {
  MoeWeights weights;
  std::vector<Vec> gate_up;  // E x [2I, H]
  std::vector<Vec> down;     // E x [H, I]
};

// out[t] for tokens of x [T, H] (bf16 values) and logits [T, E], in double.
Vec moe_reference(const Experts& ex, const Vec& x, const Vec& logits, const Case& c) {
  const int64_t H = c.H, I = c.I, E = c.E;
  Vec out(static_cast<size_t>(c.T * H));
  for (int64_t t = 0; t < c.T; ++t) {
    const float* l = logits.data() + t * E;
    double mx = l[0], z = 0;
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, double(l[e]));
    for (int64_t e = 0; e < E; ++e) z += std::exp(double(l[e]) - mx);
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
    std::vector<double> w(static_cast<size_t>(c.k));
    double picked = 0;
    for (int64_t j = 0; j < c.k; ++j)
      picked += w[size_t(j)] = std::exp(l[order[size_t(j)]] - mx) / z;
    const float* xt = x.data() + t * H;
    std::vector<double> acc(static_cast<size_t>(H), 0.0);
    for (int64_t j = 0; j < c.k; ++j) {
      const Vec& gu = ex.gate_up[size_t(order[size_t(j)])];
      const Vec& dn = ex.down[size_t(order[size_t(j)])];
      std::vector<double> act(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          g += double(gu[size_t(i * H + h)]) * xt[h];
          u += double(gu[size_t((I + i) * H + h)]) * xt[h];
        }
        act[size_t(i)] = g / (1.0 + std::exp(-g)) * u;
      }
      const double wj = w[size_t(j)] / (c.renormalize ? picked : 1.0);
      for (int64_t h = 0; h < H; ++h) {
        double y = 0;
        for (int64_t i = 0; i < I; ++i) y += double(dn[size_t(h * I + i)]) * act[size_t(i)];
        acc[size_t(h)] += wj * y;
      }
    }
    for (int64_t h = 0; h < H; ++h) out[size_t(t * H + h)] = float(acc[size_t(h)]);
  }
  return out;
}

class CudaMoe : public test::CudaTest {
 protected:
  // A [n, k] bf16 weight of N(0, 1/k) values on the device, and its values; quantized
  // (quantize_rtn, as --quantization does at load) when `quant` is enabled, the values then
  // dequantized.
  LinearWeight weight(int64_t n, int64_t k, Vec& values, QuantScheme quant = {}) {
    std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(float(k)));
    std::vector<uint16_t> bits(static_cast<size_t>(n * k));
    values.resize(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      bits[i] = f32_to_bf16(d(rng));
      values[i] = bf16_to_f32(bits[i]);
    }
    if (quant.enabled()) {
      const QuantizedWeight q = quantize_rtn(bits.data(), n, k, quant, "expert");
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < k; ++i) values[size_t(j * k + i)] = q.dequantize(j, i);
      return be->make_quantized_linear_weight(q);
    }
    return be->make_linear_weight(Tensor::contiguous(bits.data(), DType::BF16, {n, k}));
  }
  Experts experts(const Case& c) {
    Experts ex;
    ex.gate_up.resize(size_t(c.E));
    ex.down.resize(size_t(c.E));
    for (int64_t e = 0; e < c.E; ++e) {
      ex.weights.gate_up.push_back(weight(2 * c.I, c.H, ex.gate_up[size_t(e)], c.quant));
      ex.weights.down.push_back(weight(c.H, c.I, ex.down[size_t(e)], c.quant));
    }
    return ex;
  }
  Vec logits(const Case& c) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    Vec l(static_cast<size_t>(c.T * c.E));
    for (float& v : l) v = c.tied_logits ? 0.5f * std::round(2.0f * d(rng)) : d(rng);
    return l;
  }
  Vec hidden(const Case& c) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    Vec x(static_cast<size_t>(c.T * c.H));
    for (float& v : x) v = ref::round_bf16(d(rng));
    return x;
  }
  // fused_moe of rows [t0, t1) of x and logits, as a batch of their own.
  Vec run(const Experts& ex, const Vec& x, const Vec& l, const Case& c, int64_t t0, int64_t t1) {
    const int64_t T = t1 - t0;
    Tensor xt = bf16(Vec(x.begin() + t0 * c.H, x.begin() + t1 * c.H), {T, c.H});
    Tensor lt = f32(Vec(l.begin() + t0 * c.E, l.begin() + t1 * c.E), {T, c.E});
    Tensor out = poisoned(DType::BF16, {T, c.H});
    be->fused_moe(out, xt, lt, ex.weights, int(c.k), c.renormalize);
    return get(out);
  }
};

class CudaMoeShapes : public CudaMoe, public ::testing::WithParamInterface<Case> {};

TEST_P(CudaMoeShapes, MatchesTheScalarReference) {
  const Case c = GetParam();
  rng.seed(uint32_t(c.T * 131 + c.E * 7 + c.k + c.H));
  const Experts ex = experts(c);
  const Vec x = hidden(c), l = logits(c);
  const Vec got = run(ex, x, l, c, 0, c.T);
  const Vec want = moe_reference(ex, x, l, c);
  expect_close_scaled(got, want, 2e-2, "fused_moe");
  double err = 0, mag = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, double(std::fabs(got[i] - want[i])));
    mag = std::max(mag, double(std::fabs(want[i])));
  }
  std::printf("T %ld H %ld I %ld E %ld k %ld (%s%s%s%s): max error %.2e, max |out| %.2f\n",
              long(c.T), long(c.H), long(c.I), long(c.E), long(c.k),
              cuda::moe_use_tiled(c.T, c.k, c.E) ? "tiled GEMM" : "grouped GEMV",
              c.tied_logits ? ", tied logits" : "", c.quant.enabled() ? ", " : "",
              c.quant.enabled() ? quantization_name(c.quant).c_str() : "", err, mag);

  // Batch invariance: single tokens (the GEMV path, like any decode-sized batch) or, for a
  // tiled batch, all but its first 3 tokens as a batch of their own (still tiled, rows sorted
  // into other tiles) give its rows bit for bit.
  const bool tiled = cuda::moe_use_tiled(c.T, c.k, c.E);
  const int64_t t0 = 3;
  if (tiled && cuda::moe_use_tiled(c.T - t0, c.k, c.E)) {
    const Vec part = run(ex, x, l, c, t0, c.T);
    EXPECT_EQ(0, std::memcmp(part.data(), got.data() + t0 * c.H, part.size() * 4))
        << "rows of a tiled batch depend on the batch";
  } else if (!tiled) {
    for (int64_t t = 0; t < c.T; t += std::max<int64_t>(1, c.T / 4)) {
      const Vec one = run(ex, x, l, c, t, t + 1);
      EXPECT_EQ(0, std::memcmp(one.data(), got.data() + t * c.H, size_t(c.H) * 4)) << "token " << t;
    }
  } else {
    ADD_FAILURE() << "no batch-invariance check for this case";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMoeShapes,
                         ::testing::Values(
                             // Mixtral's router (8 experts, top 2) and Qwen3-MoE-like (16, top 4):
                             // decode and small prefills on the GEMV path.
                             Case{1, 64, 32, 8, 2, true}, Case{5, 64, 32, 8, 2, true},
                             Case{40, 64, 32, 8, 2, false}, Case{1, 64, 32, 16, 4, true},
                             Case{5, 72, 40, 16, 4, false}, Case{40, 64, 32, 16, 4, true, true},
                             // Qwen3-30B-A3B's router at a small hidden size.
                             Case{1, 64, 32, 128, 8, true}, Case{5, 64, 32, 128, 8, true},
                             Case{40, 64, 16, 128, 8, true, true},
                             // K past one pass of the GEMV's lanes (1056 / 8 = 132 chunks > 128).
                             Case{5, 1056, 24, 8, 2, true},
                             // The tiled GEMM: partial row, column and k tiles (I 40: k steps of 32
                             // + 8), experts with several row tiles (top 1 of 2).
                             Case{100, 72, 40, 8, 2, true}, Case{70, 64, 96, 16, 4, false, true},
                             Case{200, 64, 32, 2, 1, false}));

// Quantized experts on both paths: decode-sized steps (grouped GEMV) and prefills (tiled GEMM),
// K tails (I 40: a k step of 8 past 32; int4-g32 / int8-g32: a last group of 8), K past one pass
// of the GEMV's lanes, Qwen3-30B-A3B's router, and experts with several row tiles.
INSTANTIATE_TEST_SUITE_P(
    Quantized, CudaMoeShapes,
    ::testing::Values(Case{1, 64, 32, 8, 2, true, false, kInt8},
                      Case{5, 72, 40, 16, 4, false, false, kInt8},
                      Case{100, 72, 40, 8, 2, true, false, kInt8},
                      Case{5, 64, 32, 128, 8, true, false, kInt8},
                      Case{5, 72, 40, 16, 4, false, false, kInt8G32},
                      Case{70, 64, 96, 16, 4, false, true, kInt8G32},
                      Case{1, 64, 32, 8, 2, true, false, kInt4G32},
                      Case{5, 72, 40, 16, 4, false, false, kInt4G32},
                      Case{5, 1056, 24, 8, 2, true, false, kInt4G32},
                      Case{100, 72, 40, 8, 2, true, false, kInt4G32},
                      Case{200, 64, 32, 2, 1, false, false, kInt4G32}));

// A captured fused_moe replays whatever routing the new logits give: balanced, tied, and every
// token sending its top 2 to experts 3 and 5 (one expert with all 40 rows: 3 tiles of 16), each
// equal to eager bit for bit and near the reference. bf16, int8 and int4-g32 experts.
class CudaMoeGraph : public CudaMoe, public ::testing::WithParamInterface<QuantScheme> {};

TEST_P(CudaMoeGraph, ReplaysAnyRouting) {
  const Case c{40, 64, 32, 16, 4, true, false, GetParam()};
  const Experts ex = experts(c);
  Tensor xt = alloc(DType::BF16, {c.T, c.H}), lt = alloc(DType::F32, {c.T, c.E});
  Tensor out = alloc(DType::BF16, {c.T, c.H});
  auto record = [&] { be->fused_moe(out, xt, lt, ex.weights, int(c.k), c.renormalize); };
  auto fill = [&](const Vec& x, const Vec& l) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
    be->upload(xt, h.data());
    be->upload(lt, l.data());
  };
  fill(hidden(c), logits(c));
  record();  // warm-up: the scratch and the weight table exist before capture
  std::unique_ptr<DeviceGraph> g = be->capture_graph(record);
  ASSERT_NE(g, nullptr);
  for (int round = 0; round < 3; ++round) {
    Case rc = c;
    rc.tied_logits = round == 1;
    const Vec x = hidden(rc);
    Vec l = logits(rc);
    if (round == 2)
      for (int64_t t = 0; t < c.T; ++t) {
        l[size_t(t * c.E + 3)] = 9.0f;
        l[size_t(t * c.E + 5)] = 8.0f;
      }
    fill(x, l);
    record();
    const Vec eager = get(out);
    be->upload(out, std::vector<uint16_t>(size_t(c.T * c.H), 0xffff).data());
    g->replay();
    EXPECT_EQ(get(out), eager) << "round " << round;
    expect_close_scaled(eager, moe_reference(ex, x, l, rc), 2e-2, "fused_moe (graph round)");
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaMoeGraph, ::testing::Values(QuantScheme{}, kInt8, kInt4G32),
                         [](const ::testing::TestParamInfo<QuantScheme>& info) {
                           std::string s = quantization_name(info.param);
                           for (char& ch : s)
                             ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return s;
                         });

// The host-side geometry: the item bound holds for the worst routing, chunks stay in budget,
// and the path choice is the same for a batch and the graph bucket it pads to.
TEST(CudaMoeGeometry, ItemsChunksAndPaths) {
  for (int64_t E : {1, 8, 128})
    for (int64_t n : {1, 7, 64, 1000})
      for (int tile : {1, 16, 64}) {
        // Worst case: every expert with rows has one more than a multiple of the tile.
        int64_t worst = 0, left = n;
        for (int64_t e = 0; e < E && left > 0; ++e) {
          const int64_t rows = e + 1 < E ? std::min<int64_t>(left, 1) : left;
          worst += (rows + tile - 1) / tile;
          left -= rows;
        }
        EXPECT_LE(worst, cuda::moe_max_items(n, E, tile)) << E << " " << n << " " << tile;
      }
  EXPECT_EQ(cuda::moe_chunk_tokens(100, 8, 1000), 100);
  EXPECT_LE(cuda::moe_chunk_tokens(1 << 20, 8, 5632) * 8 * 5632, cuda::kMoeScratchBytes);
  EXPECT_LE(cuda::moe_chunk_tokens(1 << 24, 1, 64), cuda::kMoeMaxChunkRows);
  EXPECT_EQ(cuda::moe_chunk_tokens(5, 8, int64_t(1) << 40), 1);
  for (int64_t b = 17; b <= 512; ++b) {  // buckets past 16 are multiples of 16
    const int64_t bucket = (b + 15) / 16 * 16;
    EXPECT_EQ(cuda::moe_use_tiled(b, 8, 128), cuda::moe_use_tiled(bucket, 8, 128)) << b;
    EXPECT_EQ(cuda::moe_use_tiled(b, 2, 8), cuda::moe_use_tiled(bucket, 2, 8)) << b;
  }
  for (int64_t b = 1; b <= 16; ++b) EXPECT_FALSE(cuda::moe_use_tiled(b, 8, 128));
  EXPECT_TRUE(cuda::moe_use_tiled(257, 8, 128));
}

}  // namespace
}  // namespace nanovllm
