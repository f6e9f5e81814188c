// The quantized CPU GEMM (qgemm.h) against the plain fp32 product of x and the dequantized
// weights (QuantizedWeight::dequantize, the format's definition).
//
// Tolerance: for int8 weights the kernel rounds each x row to integers times sx = max|x| / 16383,
// so a product errs by at most sum_k |w_k| * sx / 2. For int4 weights it rounds x to int8 codes
// in each group (max|x_group| / 127), which the check reproduces exactly (same f32 steps) and
// multiplies as the reference. Integer sums are exact; the f32 flushes and final scaling add a
// few ulps of sum_k |x_k w_k| (1e-5 of it covers them, and sums that are exactly zero get 1e-6).
// A kernel that mixes up columns, nibbles, groups or scales errs by whole terms, far beyond that.
// Every check runs the AVX2 tiles and, on a CPU with AVX-VNNI or AVX-512 VNNI, those tiles too,
// which must also equal the AVX2 ones bit for bit.
#include "backend/cpu/qgemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <vector>

#include "runtime/quant.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm::cpu {
namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
};

struct Packed {
  QuantizedWeight q;
  QuantLayout layout;
  std::unique_ptr<void, AlignedFree> data;
};

Packed make_weight(int64_t n, int64_t k, QuantScheme scheme, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<uint16_t> w(size_t(n * k));
  for (auto& v : w) v = f32_to_bf16(d(rng) + (rng() % 7 == 0 ? 1.5f : 0.0f));  // skewed groups
  Packed p;
  p.q = quantize_rtn(w.data(), n, k, scheme, "test.weight");
  p.layout = quant_layout(scheme, n, k);
  p.data.reset(::operator new(p.layout.bytes(), std::align_val_t(64)));
  pack_quantized_blocks(p.data.get(), p.q, p.layout, 0, p.layout.nblocks);
  return p;
}

// The tile sets this CPU runs: AVX2 always, AVX-VNNI, AVX-512 VNNI and AMX INT8 where present.
std::vector<QGemmIsa> isas() {
  __builtin_cpu_init();
  std::vector<QGemmIsa> v = {QGemmIsa::AVX2};
  if (__builtin_cpu_supports("avxvnni")) v.push_back(QGemmIsa::AVX_VNNI);
  if (cpu_has_avx512() && __builtin_cpu_supports("avx512vnni")) v.push_back(QGemmIsa::AVX512_VNNI);
  if (cpu_has_amx_int8()) v.push_back(QGemmIsa::AMX_INT8);
  return v;
}

std::vector<QuantScheme> schemes() {
  return {{QuantFormat::Int8, 0},  {QuantFormat::Int8, 32},  {QuantFormat::Int8, 128},
          {QuantFormat::Int4, 32},  {QuantFormat::Int4, 64},  {QuantFormat::Int4, 128}};
}

// Runs qgemm on x [m, k] (row stride ldx) and checks every output; returns the mismatches.
int check(const Packed& w, const std::vector<float>& x, int64_t m, int64_t ldx,
          const std::vector<uint16_t>* bias, ThreadPool& pool, GemmScratch* scratch, QGemmIsa isa) {
  const int64_t n = w.q.n, k = w.q.k, ldo = n + 3;
  std::vector<float> out(size_t(m * ldo), 777.0f);
  qgemm({out.data(), ldo, x.data(), ldx, w.data.get(), &w.layout, bias ? bias->data() : nullptr, m,
         scratch},
        pool, isa);
  int bad = 0;
  const bool int4 = w.q.scheme.format == QuantFormat::Int4;
  std::vector<double> sx(static_cast<size_t>(k));  // int8 weights: x's step at each k
  std::vector<float> xr(static_cast<size_t>(k));   // int4 weights: x on the int8 grid
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x.data() + i * ldx;
    if (int4) {  // the grid of qgemm.h, computed as the kernel does (f32), so no rounding slack
      for (int64_t c0 = 0; c0 < k; c0 += w.q.scheme.group) {
        const int64_t c1 = std::min(k, c0 + w.q.scheme.group);
        float amax = 0;
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xi[c]));
        const float step = amax / 127.0f, inv = step > 0 ? 1.0f / step : 0.0f;
        for (int64_t c = c0; c < c1; ++c) xr[size_t(c)] = std::nearbyint(xi[c] * inv) * step;
      }
    } else {
      double amax = 0;
      for (int64_t c = 0; c < k; ++c) amax = std::max(amax, double(std::fabs(xi[c])));
      std::fill(sx.begin(), sx.end(), amax / 16383.0);
    }
    for (int64_t j = 0; j < ldo; ++j) {
      const float got = out[size_t(i * ldo + j)];
      if (j >= n) {
        if (got != 777.0f && ++bad <= 3) ADD_FAILURE() << "wrote past column " << n << " at " << j;
        continue;
      }
      double want = bias ? bf16_to_f32((*bias)[size_t(j)]) : 0.0, xerr = 0, mag = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double wv = w.q.dequantize(j, c), xv = int4 ? xr[size_t(c)] : xi[c];
        want += wv * xv;
        if (!int4) xerr += std::fabs(wv) * sx[size_t(c)] * 0.5;
        mag += std::fabs(wv * xv);
      }
      const double tol = xerr * 1.001 + 1e-5 * mag + 1e-6;
      if (!(std::fabs(got - want) <= tol) && ++bad <= 3) {
        ADD_FAILURE() << quantization_name(w.q.scheme) << " " << qgemm_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k
                      << " threads=" << pool.size() << " at [" << i << ", " << j << "]: got "
                      << got << ", want " << want << " (tolerance " << tol << ")";
      }
    }
  }
  return bad;
}

std::vector<float> random_x(int64_t m, int64_t ldx, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(size_t(m * ldx));
  for (auto& v : x) v = d(rng);
  return x;
}

TEST(QGemm, MatchesDequantizedReference) {
  std::mt19937 rng(5);
  ThreadPool pool1(1), pool3(3);
  GemmScratch scratch;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {3, 5}, {8, 64}, {17, 70}, {33, 130}, {100, 600}, {40, 1100}, {9, 1030}};
  for (QuantScheme s : schemes()) {
    for (auto [n, k] : shapes) {
      Packed w = make_weight(n, k, s, rng);
      std::vector<uint16_t> bias(static_cast<size_t>(n));
      for (auto& b : bias) b = f32_to_bf16(float(rng() % 200) / 50.0f - 2.0f);
      for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 12, 33, 70}) {
        const int64_t ldx = k + 3;
        std::vector<float> x = random_x(m, ldx, rng);
        for (QGemmIsa isa : isas()) {
          for (ThreadPool* pool : {&pool1, &pool3}) {
            const bool with_bias = (m + n) % 2 == 0;
            if (check(w, x, m, ldx, with_bias ? &bias : nullptr, *pool,
                      pool == &pool1 ? &scratch : nullptr, isa) > 0) {
              return;
            }
          }
        }
      }
    }
  }
}

// A row's outputs are bitwise the same alone or in any batch, on any number of threads, with the
// AVX2, AVX-VNNI or AVX-512 VNNI tiles.
TEST(QGemm, RowsDoNotDependOnBatchOrThreads) {
  std::mt19937 rng(8);
  ThreadPool pool1(1), pool2(2), pool5(5);
  for (QuantScheme s : schemes()) {
    const int64_t n = 75, k = 1100, m = 37;
    Packed w = make_weight(n, k, s, rng);
    std::vector<float> x = random_x(m, k, rng);
    std::vector<float> batch(size_t(m * n));
    qgemm({batch.data(), n, x.data(), k, w.data.get(), &w.layout, nullptr, m, nullptr}, pool2,
          QGemmIsa::AVX2);
    for (QGemmIsa isa : isas()) {  // every tile set, against the AVX2 batch
      for (ThreadPool* pool : {&pool1, &pool2, &pool5}) {
        std::vector<float> again(size_t(m * n));
        qgemm({again.data(), n, x.data(), k, w.data.get(), &w.layout, nullptr, m, nullptr}, *pool,
              isa);
        EXPECT_EQ(0, std::memcmp(again.data(), batch.data(), batch.size() * 4))
            << quantization_name(s) << " " << qgemm_isa_name(isa) << " threads " << pool->size();
      }
      for (int64_t i = 0; i < m; i += 6) {
        std::vector<float> one(static_cast<size_t>(n));
        qgemm({one.data(), n, x.data() + i * k, k, w.data.get(), &w.layout, nullptr, 1, nullptr},
              pool2, isa);
        EXPECT_EQ(0, std::memcmp(one.data(), batch.data() + i * n, size_t(n) * 4))
            << quantization_name(s) << " " << qgemm_isa_name(isa) << " row " << i;
      }
    }
  }
}

// A row with a non-finite x gives NaN outputs; the other rows are untouched by it. Batches of 3
// rows and of 21 (on AVX-512 VNNI a tall tile of 16 rows, then 5).
TEST(QGemm, NonFiniteRowStaysInItsRow) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  for (QuantScheme s : schemes()) {
    for (const int64_t m : {3, 21}) {
      const int64_t n = 20, k = 96;
      Packed w = make_weight(n, k, s, rng);
      std::vector<float> x = random_x(m, k, rng);
      x[size_t(k + 7)] = std::numeric_limits<float>::infinity();
      for (QGemmIsa isa : isas()) {
        std::vector<float> out(size_t(m * n));
        qgemm({out.data(), n, x.data(), k, w.data.get(), &w.layout, nullptr, m, nullptr}, pool,
              isa);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const float v = out[size_t(i * n + j)];
            EXPECT_TRUE(i == 1 ? std::isnan(v) : std::isfinite(v))
                << quantization_name(s) << " " << qgemm_isa_name(isa) << " m " << m << " row " << i
                << " column " << j << ": " << v;
          }
        }
      }
    }
  }
}

// The embedding lookup's row unpacking gives the dequantized values exactly.
TEST(QGemm, UnpackRowIsTheDequantizedRow) {
  std::mt19937 rng(4);
  for (QuantScheme s : schemes()) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{19, 70}, {8, 256}, {3, 1}}) {
      Packed w = make_weight(n, k, s, rng);
      std::vector<float> row(static_cast<size_t>(k));
      for (int64_t j = 0; j < n; ++j) {
        unpack_quantized_row(row.data(), w.data.get(), w.layout, j);
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(row[size_t(i)], w.q.dequantize(j, i)) << quantization_name(s) << " [" << j << ", " << i << "]";
        }
      }
    }
  }
}

// NANOVLLM_CPU_ISA's choice: avx2 keeps the AVX2 tiles; auto takes AVX-512 VNNI where the CPU
// has it, else AVX-VNNI where it has that; avx512 and avxvnni demand theirs.
TEST(QGemm, IsaSelection) {
  __builtin_cpu_init();
  const bool vnni = cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  const bool avx_vnni = __builtin_cpu_supports("avxvnni");
  const bool amx = cpu_has_amx_int8();
  std::printf("this CPU runs the AVX2%s%s%s quantized tiles\n", avx_vnni ? ", AVX-VNNI" : "",
              vnni ? ", AVX-512 VNNI" : "", amx ? ", AMX INT8" : "");
  EXPECT_EQ(select_qgemm_isa(CpuIsa::AVX2), QGemmIsa::AVX2);
  EXPECT_EQ(select_qgemm_isa(CpuIsa::Auto), amx        ? QGemmIsa::AMX_INT8
                                            : vnni     ? QGemmIsa::AVX512_VNNI
                                            : avx_vnni ? QGemmIsa::AVX_VNNI
                                                       : QGemmIsa::AVX2);
  if (amx) {
    EXPECT_EQ(select_qgemm_isa(CpuIsa::AMX), QGemmIsa::AMX_INT8);
  } else {
    EXPECT_THROW(select_qgemm_isa(CpuIsa::AMX), Error);
  }
  if (vnni) {
    EXPECT_EQ(select_qgemm_isa(CpuIsa::AVX512), QGemmIsa::AVX512_VNNI);
  } else {
    EXPECT_THROW(select_qgemm_isa(CpuIsa::AVX512), Error);
  }
  if (avx_vnni) {
    EXPECT_EQ(select_qgemm_isa(CpuIsa::AVXVNNI), QGemmIsa::AVX_VNNI);
  } else {
    EXPECT_THROW(select_qgemm_isa(CpuIsa::AVXVNNI), Error);
  }
}

TEST(QGemm, EmptyBatchWritesNothing) {
  std::mt19937 rng(2);
  ThreadPool pool(2);
  Packed w = make_weight(16, 64, {QuantFormat::Int4, 32}, rng);
  for (QGemmIsa isa : isas()) {
    float out = 5.0f;
    qgemm({&out, 16, nullptr, 64, w.data.get(), &w.layout, nullptr, 0, nullptr}, pool, isa);
    EXPECT_EQ(out, 5.0f);
  }
}

}  // namespace
}  // namespace nanovllm::cpu
