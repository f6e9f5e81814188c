// Quantized weights on the CUDA backend (make_quantized_linear_weight, quant_linear.cu): linear()
// on int8 (per row, grouped) and int4 (g32, g64, g128) weights of odd N, K off a group boundary
// and K % 8 != 0, for M on the GEMV path (1, 3, 16) and the dequantize + cuBLASLt path (40), bf16
// and f32 out, with and without bias, against the fp32 reference product of x and the
// dequantized weights (QuantizedWeight::dequantize; the cuBLASLt path against those weights
// rounded to bf16, which is what it multiplies); the embedding lookups exact against the
// dequantized rows rounded to bf16; a graph replay equal to eager; the GEMV's rows independent
// of M; and a format without kernels refused by name. Needs a GPU (label cuda) or the emulator.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/cuda_fixture.h"
#include "runtime/quant.h"

namespace nanovllm {
namespace {

using ref::Vec;
using test::CudaTest;
using test::expect_close_scaled;
using test::random_bf16;

class CudaQuant : public CudaTest {
 protected:
  // A random bf16 [n, k] weight quantized round-to-nearest in `scheme`.
  QuantizedWeight random_quantized(QuantScheme scheme, int64_t n, int64_t k) {
    const Vec v = random_bf16(rng, size_t(n * k));
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
    return quantize_rtn(bits.data(), n, k, scheme, "test weight");
  }
};

Vec dequantized(const QuantizedWeight& q) {
  Vec w(size_t(q.n * q.k));
  for (int64_t j = 0; j < q.n; ++j)
    for (int64_t i = 0; i < q.k; ++i) w[size_t(j * q.k + i)] = q.dequantize(j, i);
  return w;
}

struct Case {
  QuantScheme scheme;
  int64_t n, k;
};

const Case kCases[] = {
    {{QuantFormat::Int8, 0}, 37, 256},   {{QuantFormat::Int8, 0}, 33, 100},
    {{QuantFormat::Int8, 32}, 40, 200},  {{QuantFormat::Int4, 32}, 37, 256},
    {{QuantFormat::Int4, 32}, 21, 52},   {{QuantFormat::Int4, 64}, 72, 200},
    {{QuantFormat::Int4, 128}, 37, 384},
};

TEST_F(CudaQuant, LinearMatchesDequantizedReference) {
  for (const Case& c : kCases) {
    const std::string name = quantization_name(c.scheme) + " [" + std::to_string(c.n) + ", " +
                             std::to_string(c.k) + "]";
    SCOPED_TRACE(name);
    const QuantizedWeight q = random_quantized(c.scheme, c.n, c.k);
    const Vec wv = dequantized(q), wv_bf16 = ref::round_bf16(wv);
    LinearWeight w = be->make_quantized_linear_weight(q);
    EXPECT_EQ(w.n, c.n);
    EXPECT_EQ(w.k, c.k);
    EXPECT_EQ(w.quant.format, c.scheme.format);
    const Vec bias = random_bf16(rng, size_t(c.n));
    const Tensor bias_t = bf16(bias, {c.n});
    for (int64_t m : {1, 3, 16, 40}) {
      const Vec xv = random_bf16(rng, size_t(m * c.k));
      const Tensor x = bf16(xv, {m, c.k});
      const bool gemv = m <= 16 && c.k % 8 == 0;
      for (bool f32_out : {false, true}) {
        for (bool with_bias : {false, true}) {
          Tensor out = poisoned(f32_out ? DType::F32 : DType::BF16, {m, c.n});
          be->linear(out, x, w, with_bias ? &bias_t : nullptr);
          const Vec want = ref::linear(xv, gemv ? wv : wv_bf16, with_bias ? bias : Vec{}, m, c.n, c.k);
          expect_close_scaled(get(out), want, f32_out ? 1e-3 : 1e-2,
                              (name + " m " + std::to_string(m) + (f32_out ? " f32" : " bf16") +
                               (with_bias ? " bias" : ""))
                                  .c_str());
        }
      }
    }
  }
}

// The GEMV's row r does not depend on M: rows of M = 3 equal the first 3 rows of M = 16.
TEST_F(CudaQuant, GemvRowsDoNotDependOnM) {
  for (QuantScheme s : {QuantScheme{QuantFormat::Int8, 0}, QuantScheme{QuantFormat::Int4, 64}}) {
    const int64_t n = 45, k = 192;
    LinearWeight w = be->make_quantized_linear_weight(random_quantized(s, n, k));
    const Tensor x = bf16(random_bf16(rng, size_t(16 * k)), {16, k});
    Tensor o16 = poisoned(DType::F32, {16, n}), o3 = poisoned(DType::F32, {3, n});
    be->linear(o16, x, w, nullptr);
    be->linear(o3, x.slice_rows(0, 3), w, nullptr);
    const Vec a = get(o16), b = get(o3);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin())) << quantization_name(s);
  }
}

// The lookups of a quantized table: each row exactly its dequantized values rounded to bf16; a
// vocab-parallel slice gives zeros for the other ranks' ids, and the ranks sum to the whole.
TEST_F(CudaQuant, EmbeddingIsTheDequantizedRows) {
  for (QuantScheme s : {QuantScheme{QuantFormat::Int8, 0}, QuantScheme{QuantFormat::Int4, 32}}) {
    SCOPED_TRACE(quantization_name(s));
    const int64_t vocab = 40, hidden = 96, tp = 2, rows = vocab / tp;
    const QuantizedWeight q = random_quantized(s, vocab, hidden);
    const Vec table = ref::round_bf16(dequantized(q));
    LinearWeight w = be->make_quantized_linear_weight(q);
    const std::vector<int32_t> ids = {0, 39, 19, 20, 7, 7, 33, 1, 21};
    const int64_t T = int64_t(ids.size());
    const Tensor id_t = ints(ids, DType::I32);
    Tensor out = poisoned(DType::BF16, {T, hidden});
    be->embedding(out, id_t, w);
    expect_close_scaled(get(out), ref::embedding(ids, table, hidden), 0.0, "embedding");

    Vec sum(size_t(T * hidden), 0.0f);
    for (int64_t r = 0; r < tp; ++r) {
      LinearWeight part = be->make_quantized_linear_weight(slice_rows(q, r * rows, (r + 1) * rows));
      Tensor o = poisoned(DType::BF16, {T, hidden});
      be->vocab_parallel_embedding(o, id_t, part, r * rows);
      const Vec got = get(o);
      expect_close_scaled(got, ref::vocab_parallel_embedding(ids, table, hidden, r * rows, rows),
                          0.0, "vocab_parallel_embedding");
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];
    }
    expect_close_scaled(sum, ref::embedding(ids, table, hidden), 0.0, "sum over ranks");
  }
}

// Both paths captured (the GEMV at M = 3, dequantize + cuBLASLt at M = 40, whose scratch the
// eager warm-up grew) replay equal to eager on new inputs.
TEST_F(CudaQuant, GraphReplayEqualsEager) {
  const int64_t k = 128, n = 56;
  LinearWeight w8 = be->make_quantized_linear_weight(random_quantized({QuantFormat::Int8, 0}, n, k));
  LinearWeight w4 = be->make_quantized_linear_weight(random_quantized({QuantFormat::Int4, 32}, n, k));
  const Tensor bias = bf16(random_bf16(rng, size_t(n)), {n});
  for (int64_t m : {int64_t(3), int64_t(40)}) {
    SCOPED_TRACE("m " + std::to_string(m));
    Tensor x = alloc(DType::BF16, {m, k});
    Tensor y8 = alloc(DType::BF16, {m, n}), y4 = alloc(DType::F32, {m, n});
    auto record = [&] {
      be->linear(y8, x, w8, &bias);
      be->linear(y4, x, w4, nullptr);
    };
    std::vector<uint16_t> xin(static_cast<size_t>(m * k));
    auto refill = [&] {
      for (auto& v : xin) v = f32_to_bf16(test::random_vec(rng, 1)[0]);
      be->upload(x, xin.data());
    };
    refill();
    record();  // warm-up: plans and the dequantization scratch before capture
    std::unique_ptr<DeviceGraph> g = be->capture_graph(record);
    ASSERT_NE(g, nullptr);
    for (int round = 0; round < 2; ++round) {
      refill();
      record();
      const Vec e8 = get(y8), e4 = get(y4);
      be->fill_zero(y8);
      be->fill_zero(y4);
      g->replay();
      EXPECT_EQ(get(y8), e8) << "round " << round;
      EXPECT_EQ(get(y4), e4) << "round " << round;
    }
  }
}

// A scheme without kernels is an Error naming it.
TEST_F(CudaQuant, UnsupportedFormatIsRefusedByName) {
  QuantizedWeight q = QuantizedWeight::sized({QuantFormat::Int8, 12}, 8, 24);
  try {
    be->make_quantized_linear_weight(q);
    ADD_FAILURE() << "int8 in groups of 12 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not run quantized weights (int8-g12)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
