// The CPU GEMM (both ISAs) and its ThreadPool against the scalar reference.
//
// Tolerance: |out - ref| <= 1e-5 + 1e-3 * sum_k |x_k * w_k| (+ |bias|). Kernel and reference
// multiply the same bf16-rounded x by the same bf16 w, so every product is exact in fp32; they
// differ only in the order (and fp32 rounding) of the sums, which is bounded by about
// k * 2^-24 * sum |x w| (6e-5 of it at k = 1000). Scaling by sum |x w| rather than |ref| keeps
// cancelling sums fair; 1e-5 covers sums that are exactly zero. A kernel that rounds x wrongly
// (truncation) errs by ~2^-9 of a term, which the k = 1 cases and RoundsXToNearestEven catch.
#include "backend/cpu/gemm.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <vector>

#include "backend/cpu/gemm_internal.h"
#include "reference/gemm_reference.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm::cpu {
namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
};
std::unique_ptr<void, AlignedFree> packed_alloc(int64_t n, int64_t k) {
  return {::operator new(packed_weight_bytes(n, k), std::align_val_t(64)), {}};
}

// Every kernel set this CPU can run (not only the one select_gemm_isa picks).
std::vector<GemmIsa> isas() {
  std::vector<GemmIsa> v{GemmIsa::AVX2};
  if (cpu_has_avx512()) v.push_back(GemmIsa::AVX512_FMA);
  if (cpu_has_avx512_bf16()) v.push_back(GemmIsa::AVX512_BF16);
  if (cpu_has_amx_bf16()) v.push_back(GemmIsa::AMX_BF16);
  return v;
}

// Non-zero values in [-1, -0.05] u [0.05, 1].
float nonzero(std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.05f, 1.0f);
  float v = mag(rng);
  return (rng() & 1) ? v : -v;
}

struct Problem {
  int64_t m, n, k, ldx, ldo;
  std::vector<float> x;
  std::vector<uint16_t> w, bias;
  std::vector<float> ref, mag;        // with bias
  std::vector<float> ref_nb, mag_nb;  // without bias
};

Problem make_problem(int64_t m, int64_t n, int64_t k, std::mt19937& rng) {
  Problem p{m, n, k, k + 5, n + 3, {}, {}, {}, {}, {}, {}, {}};
  p.x.resize(size_t(m * p.ldx));
  for (auto& v : p.x) v = nonzero(rng);
  p.w.resize(size_t(n * k));
  for (auto& v : p.w) v = f32_to_bf16(nonzero(rng));
  p.bias.resize(size_t(n));
  for (auto& v : p.bias) v = f32_to_bf16(nonzero(rng));
  for (auto* out : {&p.ref, &p.mag, &p.ref_nb, &p.mag_nb}) out->resize(size_t(m * n));
  ref::linear(p.ref.data(), n, p.x.data(), p.ldx, p.w.data(), p.bias.data(), m, n, k);
  ref::linear_abs(p.mag.data(), n, p.x.data(), p.ldx, p.w.data(), p.bias.data(), m, n, k);
  ref::linear(p.ref_nb.data(), n, p.x.data(), p.ldx, p.w.data(), nullptr, m, n, k);
  ref::linear_abs(p.mag_nb.data(), n, p.x.data(), p.ldx, p.w.data(), nullptr, m, n, k);
  return p;
}

// Runs one variant; returns the number of mismatches (reports the first few).
int check(const Problem& p, const void* packed, GemmIsa isa, ThreadPool& pool, bool with_bias,
          bool strided) {
  const int64_t ldx = strided ? p.ldx : p.k;
  const int64_t ldo = strided ? p.ldo : p.n;
  std::vector<float> x(size_t(p.m * ldx));
  for (int64_t i = 0; i < p.m; ++i)
    std::memcpy(&x[size_t(i * ldx)], &p.x[size_t(i * p.ldx)], size_t(p.k) * 4);
  const float kSentinel = 12345.0f;
  std::vector<float> out(size_t(p.m * ldo), kSentinel);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) out[size_t(i * ldo + j)] = NAN;  // must be overwritten
  GemmArgs a{out.data(), ldo, x.data(), ldx, packed, with_bias ? p.bias.data() : nullptr,
             p.m,        p.n, p.k};
  gemm(a, pool, isa);
  const auto& ref = with_bias ? p.ref : p.ref_nb;
  const auto& mag = with_bias ? p.mag : p.mag_nb;
  int bad = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < ldo; ++j) {
      const float got = out[size_t(i * ldo + j)];
      bool ok;
      float want;
      if (j < p.n) {
        want = ref[size_t(i * p.n + j)];
        ok = std::fabs(got - want) <= 1e-5f + 1e-3f * mag[size_t(i * p.n + j)];
      } else {
        want = kSentinel;
        ok = got == kSentinel;  // the padding between rows is untouched
      }
      if (!ok && ++bad <= 3)
        ADD_FAILURE() << gemm_isa_name(isa) << " m=" << p.m << " n=" << p.n << " k=" << p.k
                      << " threads=" << pool.size() << " bias=" << with_bias
                      << " strided=" << strided << " at [" << i << ", " << j << "]: got " << got
                      << ", want " << want;
    }
  }
  return bad;
}

TEST(Gemm, MatchesReferenceOnOddShapes) {
  std::mt19937 rng(1234);
  ThreadPool pool1(1), pool2(2);
  for (int64_t m : {1, 2, 3, 7, 17, 64, 130}) {
    for (int64_t n : {1, 3, 15, 16, 17, 33, 100, 257}) {
      for (int64_t k : {1, 2, 3, 31, 64, 130, 1000}) {
        Problem p = make_problem(m, n, k, rng);
        auto packed = packed_alloc(n, k);
        pack_weight(packed.get(), p.w.data(), n, k);
        for (GemmIsa isa : isas()) {
          for (ThreadPool* pool : {&pool1, &pool2}) {
            for (bool bias : {false, true}) {
              // Strided rows with 2 threads, contiguous with 1: both layouts, half the runs.
              if (check(p, packed.get(), isa, *pool, bias, pool->size() == 2) > 0) return;
            }
          }
        }
      }
    }
  }
}

// Shapes that reach the other loop-nest paths: several M blocks (a block is at most half the
// L2 of packed x rows over the whole K: {300, 1100, 2100} has several on an L2 up to 2 MiB,
// {800, ...} under the kernels' panel caps), splitting over rows (few column groups), many
// column groups, and a K that spans several cache blocks.
TEST(Gemm, MatchesReferenceOnBlockingPaths) {
  std::mt19937 rng(99);
  ThreadPool pool(2);
  // {800, 1100, 70}: split over columns with more than one M block per column group. {400, 17,
  // 301}: M blocks of 12+ panels on any L2 from 512 KiB, whose weight panels the FMA kernel sets
  // widen once (kWidenMinPanels), the last 16-column block 1 column wide, k odd and over 2 blocks.
  for (auto [m, n, k] : {std::array<int64_t, 3>{800, 40, 20},
                         {400, 17, 301},
                         {300, 17, 600},
                         {9, 130, 2100},
                         {1, 1100, 70},
                         {800, 1100, 70},
                         {300, 1100, 2100}}) {
    Problem p = make_problem(m, n, k, rng);
    auto packed = packed_alloc(n, k);
    pack_weight(packed.get(), p.w.data(), n, k);
    for (GemmIsa isa : isas()) EXPECT_EQ(check(p, packed.get(), isa, pool, true, true), 0);
  }
}

// Small batches (the wide tiles: AVX-512 M = 7..32, one or two row panels of 1..3 blocks;
// AVX2 M = 1..48, 1..8 balanced panels of up to 6 rows, 1-row tiles 4 blocks wide, 2-row
// tiles 2): every M around the panel and block-count switches and past the wide range, odd N
// (partial column groups) and odd K (the zero k padding).
TEST(Gemm, MatchesReferenceOnSmallBatches) {
  std::mt19937 rng(4321);
  ThreadPool pool1(1), pool2(2);
  for (int64_t m = 1; m <= 50; ++m) {
    for (auto [n, k] : {std::array<int64_t, 2>{47, 1}, {97, 67}, {129, 333}, {17, 1025}}) {
      Problem p = make_problem(m, n, k, rng);
      auto packed = packed_alloc(n, k);
      pack_weight(packed.get(), p.w.data(), n, k);
      for (GemmIsa isa : isas()) {
        for (ThreadPool* pool : {&pool1, &pool2}) {
          const bool bias = (m + n) % 2 == 0;
          if (check(p, packed.get(), isa, *pool, bias, pool->size() == 2) > 0) return;
        }
      }
    }
  }
}

// The engine relies on results that do not depend on the thread count: 1 and 2 threads must
// agree bit for bit, on every loop-nest path (single panel, wide tiles, panels, row split). 16
// threads (more than the cores: correctness only) take the splits of many-core machines: wide
// and single-panel tiles narrowed so that every thread has a group, and (column group, panel
// range) units where the groups alone are too few.
TEST(Gemm, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(555);
  ThreadPool pool1(1), pool2(2), pool16(16);
  for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1100, 301},
                         {5, 515, 97},
                         {8, 1100, 301},
                         {16, 2063, 1025},
                         {23, 515, 97},
                         {32, 1100, 301},
                         {33, 515, 97},
                         {200, 40, 301},
                         {300, 1100, 301},
                         {1, 520, 64},
                         {3, 1024, 64},
                         {130, 600, 70}}) {
    Problem p = make_problem(m, n, k, rng);
    auto packed = packed_alloc(n, k);
    pack_weight(packed.get(), p.w.data(), n, k);
    for (GemmIsa isa : isas()) {
      std::vector<float> out1(size_t(m * n)), out2(size_t(m * n)), out16(size_t(m * n));
      GemmArgs a{out1.data(), n, p.x.data(), p.ldx, packed.get(), p.bias.data(), m, n, k};
      gemm(a, pool1, isa);
      a.out = out2.data();
      gemm(a, pool2, isa);
      a.out = out16.data();
      gemm(a, pool16, isa);
      EXPECT_EQ(std::memcmp(out1.data(), out2.data(), out1.size() * 4), 0)
          << gemm_isa_name(isa) << " m=" << m << " n=" << n << " k=" << k;
      EXPECT_EQ(std::memcmp(out1.data(), out16.data(), out1.size() * 4), 0)
          << gemm_isa_name(isa) << " 16 threads m=" << m << " n=" << n << " k=" << k;
    }
  }
}

// A row's result is bit-identical whatever M it is computed in. The engine relies on this
// batch invariance: prefix caching, chunked prefill and batching change M, and must not change
// a single greedy token (random-weight models have near-ties a last-bit difference can flip).
TEST(Gemm, RowsDoNotDependOnBatchSize) {
  std::mt19937 rng(777);
  ThreadPool pool(2);
  const int64_t n = 300, k = 1030, full = 70;
  Problem p = make_problem(full, n, k, rng);
  auto packed = packed_alloc(n, k);
  pack_weight(packed.get(), p.w.data(), n, k);
  for (GemmIsa isa : isas()) {
    std::vector<float> all(size_t(full * n));
    gemm({all.data(), n, p.x.data(), p.ldx, packed.get(), p.bias.data(), full, n, k}, pool, isa);
    for (int64_t m = 1; m <= full; ++m) {
      std::vector<float> part(size_t(m * n));
      // The last m rows, so each row lands at another position within its panel too.
      const float* x = p.x.data() + (full - m) * p.ldx;
      gemm({part.data(), n, x, p.ldx, packed.get(), p.bias.data(), m, n, k}, pool, isa);
      EXPECT_EQ(std::memcmp(part.data(), all.data() + (full - m) * n, part.size() * 4), 0)
          << gemm_isa_name(isa) << " m=" << m;
    }
  }
}

// The AMX kernel set runs M = 1 and 2 on AVX-512 FMAs that replay tdpbf16ps's operations
// (gemm_amx_rows.cpp) and larger M on the tiles: the same bits, also where the tile unit's
// denormal rules decide (f32 denormal x, bf16 denormal weights, products and sums under the
// smallest normal, signed zeros), which the random rows above never reach.
TEST(Gemm, AmxFmaRowsEqualTilesOnEdgeValues) {
  if (!cpu_has_amx_bf16()) {
    std::printf("no AMX BF16 on this CPU: nothing to compare\n");
    return;
  }
  std::mt19937 rng(4242);
  auto pick = [&](const std::vector<float>& v) { return v[rng() % v.size()]; };
  const std::vector<float> xs = {0.5f,  -0.75f, 1e-19f, -3e-19f, 1e-40f, -2e-39f, 0.0f,
                                 -0.0f, 1e-25f, 7e15f,  -1.0f,   2e-19f, -1e-19f};
  const std::vector<float> ws = {0.25f,  -1.5f, 1e-19f,  -2e-19f, 1e-15f,
                                 0.0f,   -0.0f, -1e-15f, 3e-20f,  9.2e-41f /* bf16 denormal */,
                                 -5e-39f};
  ThreadPool pool(2);
  for (auto [n, k] : std::vector<std::array<int64_t, 2>>{{40, 70}, {17, 33}, {64, 512}}) {
    const int64_t m = 24;
    std::vector<float> x(size_t(m * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j)  // rows 0-7: tiny values only (sums near FLT_MIN)
        x[size_t(i * k + j)] = i < 8 ? pick({1e-19f, -3e-19f, 2e-19f, 1e-40f, -0.0f}) : pick(xs);
    std::vector<uint16_t> w(size_t(n * k)), bias(static_cast<size_t>(n));
    for (auto& v : w) v = f32_to_bf16(pick(ws));
    for (auto& v : bias) v = f32_to_bf16(pick({0.0f, -0.0f, 1e-38f, 0.5f}));
    auto packed = packed_alloc(n, k);
    pack_weight(packed.get(), w.data(), n, k);
    for (const uint16_t* b :
         {static_cast<const uint16_t*>(nullptr), static_cast<const uint16_t*>(bias.data())}) {
      std::vector<float> all(size_t(m * n));
      gemm({all.data(), n, x.data(), k, packed.get(), b, m, n, k}, pool, GemmIsa::AMX_BF16);
      for (int64_t rows : {1, 2}) {
        for (int64_t r0 = 0; r0 + rows <= m; r0 += rows) {
          std::vector<float> part(size_t(rows * n));
          gemm({part.data(), n, x.data() + r0 * k, k, packed.get(), b, rows, n, k}, pool,
               GemmIsa::AMX_BF16);
          EXPECT_EQ(std::memcmp(part.data(), all.data() + r0 * n, part.size() * 4), 0)
              << "n=" << n << " k=" << k << " rows " << r0 << ".." << r0 + rows - 1
              << " bias=" << (b != nullptr);
        }
      }
    }
  }
  // One k pair whose two products flush to -0: the chains end at -0, the tiles' zero padding of
  // the 16-pair step turns them to +0, and -0 (bias) + (+0) is +0 where -0 + -0 would be -0.
  const float x2[2] = {-1e-20f, -1e-20f};
  const uint16_t w2[2] = {f32_to_bf16(1e-20f), f32_to_bf16(1e-20f)}, bias2 = 0x8000;
  auto packed2 = packed_alloc(1, 2);
  pack_weight(packed2.get(), w2, 1, 2);
  std::vector<float> x24(48), out24(24);
  for (int i = 0; i < 48; ++i) x24[size_t(i)] = x2[i % 2];
  float out1 = NAN;
  gemm({&out1, 1, x2, 2, packed2.get(), &bias2, 1, 1, 2}, pool, GemmIsa::AMX_BF16);
  gemm({out24.data(), 1, x24.data(), 2, packed2.get(), &bias2, 24, 1, 2}, pool, GemmIsa::AMX_BF16);
  EXPECT_EQ(std::signbit(out1), std::signbit(out24[0])) << out1 << " vs " << out24[0];
  EXPECT_EQ(out1, 0.0f);
}

// The AVX-512 FMA kernels run the AVX2 kernels' operations in the same order per column: the same
// bits on every path (wide tiles, blocked tiles, partial blocks, bias, several threads).
TEST(Gemm, Avx512FmaEqualsAvx2BitForBit) {
  std::printf("this CPU runs the %s GEMM kernels; select_gemm_isa picks %s\n",
              cpu_has_amx_bf16()      ? "AVX2, AVX-512 FMA, AVX-512 BF16 and AMX BF16"
              : cpu_has_avx512_bf16() ? "AVX2, AVX-512 FMA and AVX-512 BF16"
              : cpu_has_avx512()      ? "AVX2 and AVX-512 FMA"
                                      : "AVX2",
              gemm_isa_name(select_gemm_isa(CpuIsa::Auto)));
  if (!cpu_has_avx512()) return;  // nothing to compare (the AVX2 kernels are checked above)
  std::mt19937 rng(31);
  ThreadPool pool(3);
  for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {1, 77, 300}, {5, 129, 257}, {16, 300, 1030}, {33, 48, 64}, {49, 70, 515}, {130, 40, 700}}) {
    Problem p = make_problem(m, n, k, rng);
    auto packed = packed_alloc(n, k);
    pack_weight(packed.get(), p.w.data(), n, k);
    std::vector<float> a(size_t(m * n)), b(size_t(m * n));
    gemm({a.data(), n, p.x.data(), p.ldx, packed.get(), p.bias.data(), m, n, k}, pool, GemmIsa::AVX2);
    gemm({b.data(), n, p.x.data(), p.ldx, packed.get(), p.bias.data(), m, n, k}, pool,
         GemmIsa::AVX512_FMA);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << m << " x " << n << " x " << k;
  }
}

// NANOVLLM_CPU_ISA's GEMM choice: avx2 keeps AVX2; auto and avx512 take an AVX-512 kernel set
// where the CPU has AVX-512 (avx512 is an Error where it has not), AMX where the CPU and the OS
// offer it; avx512 an AVX-512 one, never AMX; amx AMX or an Error.
TEST(Gemm, IsaSelection) {
  EXPECT_EQ(select_gemm_isa(CpuIsa::AVX2), GemmIsa::AVX2);
  const GemmIsa best = select_gemm_isa(CpuIsa::Auto);
  if (!cpu_has_amx_bf16()) {
    EXPECT_THROW(select_gemm_isa(CpuIsa::AMX), Error);
  }
  if (!cpu_has_avx512()) {
    EXPECT_EQ(best, GemmIsa::AVX2);
    EXPECT_THROW(select_gemm_isa(CpuIsa::AVX512), Error);
    return;
  }
  const GemmIsa avx512 = select_gemm_isa(CpuIsa::AVX512);
  EXPECT_TRUE(avx512 == GemmIsa::AVX512_FMA || avx512 == GemmIsa::AVX512_BF16);
  if (cpu_has_amx_bf16()) {
    EXPECT_EQ(best, GemmIsa::AMX_BF16);
    EXPECT_EQ(select_gemm_isa(CpuIsa::AMX), GemmIsa::AMX_BF16);
  } else {
    EXPECT_EQ(best, avx512);
  }
  if (!cpu_has_avx512_bf16()) {
    EXPECT_EQ(best, GemmIsa::AVX512_FMA);
  }
}

TEST(Gemm, RoundsXToNearestEven) {
  // x chosen on and around bf16 ties; w = 1, so out = bf16(x) exactly.
  const float xs[] = {1.00390625f,    // 1 + 2^-8: a tie, rounds to even 1.0
                      1.01171875f,    // 1 + 3*2^-8: a tie, rounds up to 1 + 2^-6
                      1.0048828125f,  // above the tie: rounds up
                      -1.00390625f,  3.0e38f, 1.0e-3f};
  const int64_t n = 1, k = 1;
  const uint16_t w = f32_to_bf16(1.0f);
  auto packed = packed_alloc(n, k);
  pack_weight(packed.get(), &w, n, k);
  ThreadPool pool(1);
  for (GemmIsa isa : isas()) {
    for (float x : xs) {
      float out = NAN;
      GemmArgs a{&out, 1, &x, 1, packed.get(), nullptr, 1, n, k};
      gemm(a, pool, isa);
      EXPECT_EQ(out, bf16_to_f32(f32_to_bf16(x))) << gemm_isa_name(isa) << " x=" << x;
    }
  }
}

// The kernels' packed x, element by element against its definition: panel p, pair i, row r
// holds x[p * mr + r][2i] and [2i + 1] rounded to bf16 (as f32 in the AVX2 / AVX-512 FMA sets'
// 8-byte pairs, as bf16 in the AVX-512 BF16 set's 4-byte ones), zero past k and for rows past
// m, and a call writes only its panels. Rows in groups of 4, 2 and 1, k in whole groups of 8 /
// 16 and not, odd k, the panel heights the drivers use (6, 12, 16, 24 and an odd one), x values
// on bf16 rounding ties.
TEST(Gemm, PackedXIsBf16PairsInPanelOrder) {
  std::mt19937 rng(31);
  std::vector<const detail::KernelSet*> sets{&detail::avx2_kernels()};
  if (cpu_has_avx512_bf16()) sets.push_back(&detail::avx512_bf16_kernels());
  for (const detail::KernelSet* ks : sets) {
    const bool f32 = ks->pair_bytes == 8;
    for (int64_t mr : {5, 6, 12, 16, 24}) {
      for (int64_t m : {1, 3, 4, 7, 8, 13, 31, 50}) {
        for (int64_t k : {1, 2, 7, 8, 9, 16, 17, 33, 1030, 2049}) {
          const int64_t ldx = k + 3, kpairs = (k + 1) / 2, npanels = (m + mr - 1) / mr;
          std::vector<float> x(size_t(m * ldx));
          for (auto& v : x) {  // normal values, half of them exactly between two bf16 values
            const uint32_t bits = uint32_t(rng()) & (rng() & 1 ? 0xffffffffu : 0xffff8000u);
            std::memcpy(&v, &bits, 4);
            if (std::fpclassify(v) != FP_NORMAL) v = 1.5f;
          }
          const int64_t panel_words = kpairs * mr * (f32 ? 2 : 1);  // 4-byte words a panel
          std::vector<uint32_t> got(size_t((npanels + 2) * panel_words), 0xdeadbeefu);
          // Panels [1, npanels) after panel 0, in two calls; one panel's room either side.
          uint32_t* dst = got.data() + panel_words;
          ks->pack_x(dst, x.data(), ldx, m, k, mr, 0, 1);
          ks->pack_x(dst, x.data(), ldx, m, k, mr, 1, npanels);
          for (int64_t i = 0; i < panel_words; ++i) {
            ASSERT_EQ(got[size_t(i)], 0xdeadbeefu) << "wrote before the panels";
            ASSERT_EQ(got[size_t((npanels + 1) * panel_words + i)], 0xdeadbeefu)
                << "wrote past them";
          }
          for (int64_t p = 0; p < npanels; ++p)
            for (int64_t i = 0; i < kpairs; ++i)
              for (int64_t r = 0; r < mr; ++r)
                for (int64_t h = 0; h < 2; ++h) {
                  const int64_t row = p * mr + r, col = 2 * i + h;
                  const uint16_t want =
                      row < m && col < k ? f32_to_bf16(x[size_t(row * ldx + col)]) : 0;
                  const int64_t at = (p * kpairs + i) * mr + r;  // the pair's index
                  const uint32_t v = f32 ? dst[2 * at + h] : dst[at];
                  const uint32_t want_bits =
                      f32 ? uint32_t(want) << 16
                          : (v & (h ? 0xffffu : 0xffff0000u)) | uint32_t(want) << (16 * h);
                  ASSERT_EQ(v, want_bits)
                      << gemm_isa_name(f32 ? GemmIsa::AVX2 : GemmIsa::AVX512_BF16) << " mr=" << mr
                      << " m=" << m << " k=" << k << " panel " << p << " pair " << i << " row " << r
                      << " half " << h;
                }
        }
      }
    }
  }
}

TEST(Gemm, UnpackWeightRowIsExact) {
  std::mt19937 rng(7);
  for (auto [n, k] : {std::array<int64_t, 2>{1, 1}, {17, 3}, {33, 130}, {100, 1000}}) {
    std::vector<uint16_t> w(size_t(n * k));
    for (auto& v : w) v = uint16_t(rng());  // any bit pattern survives packing
    auto packed = packed_alloc(n, k);
    pack_weight(packed.get(), w.data(), n, k);
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      unpack_weight_row(row.data(), packed.get(), n, k, r);
      for (int64_t i = 0; i < k; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &row[size_t(i)], 4);
        ASSERT_EQ(bits, uint32_t(w[size_t(r * k + i)]) << 16)
            << "n=" << n << " k=" << k << " row " << r << " col " << i;
      }
    }
  }
}

TEST(Gemm, EmptyBatchWritesNothing) {
  const uint16_t w = 0x3f80;
  auto packed = packed_alloc(1, 1);
  pack_weight(packed.get(), &w, 1, 1);
  ThreadPool pool(2);
  GemmArgs a{nullptr, 1, nullptr, 1, packed.get(), nullptr, 0, 1, 1};
  for (GemmIsa isa : isas()) gemm(a, pool, isa);
}

TEST(ThreadPool, ParallelForCoversEachIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 4, 7, 100, 1001}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> chunks{0};
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e, int t) {
              ASSERT_LT(b, e);
              ASSERT_GE(t, 0);
              ASSERT_LT(t, threads);
              chunks++;
              for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            },
            grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "index " << i;
        // As many chunks as threads, or as units of `grain` when fewer.
        ASSERT_EQ(chunks.load(), std::min<int64_t>(threads, (n + grain - 1) / grain));
      }
    }
  }
}

TEST(ThreadPool, ChunksAreBalancedAndCallerRunsFirst) {
  ThreadPool pool(2);
  std::thread::id caller = std::this_thread::get_id(), chunk0;
  std::mutex mu;
  std::map<int64_t, int64_t> sizes;  // chunk begin -> size
  pool.parallel_for(
      10,
      [&](int64_t b, int64_t e, int) {
        std::lock_guard<std::mutex> lock(mu);
        sizes[b] = e - b;
        if (b == 0) chunk0 = std::this_thread::get_id();
      },
      4);
  EXPECT_EQ(chunk0, caller);  // the caller claims first
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_LE(std::abs(sizes.begin()->second - sizes.rbegin()->second), 4);
  EXPECT_EQ(sizes.begin()->second + sizes.rbegin()->second, 10);
}

// run_shared: the caller alone can finish the work (a worker that never wakes costs nothing),
// every unit is claimed once, the workers that joined have returned when it returns, and the
// pool stays usable after a shared task whose workers were all late.
TEST(ThreadPool, RunSharedNeedsNoLateWorker) {
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 3000; ++rep) {  // many dispatches of both kinds, back to back
      const int64_t units = 1 + rep % 37;
      std::atomic<int64_t> next{0};
      std::vector<std::atomic<int>> hits(static_cast<size_t>(units));
      std::atomic<int> running{0};
      pool.run_shared([&](int) {
        running++;
        for (int64_t u; (u = next.fetch_add(1)) < units;) {
          volatile int spin = 0;  // a little work per unit, so that workers do join
          for (int k = 0; k < 2000; ++k) spin = spin + k;
          hits[size_t(u)]++;
        }
        running--;
      });
      EXPECT_EQ(running.load(), 0);  // no joined call outlives run_shared
      for (int64_t u = 0; u < units; ++u) ASSERT_EQ(hits[size_t(u)].load(), 1) << u;
      if (rep % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers asleep
      if (rep % 3 == 0) {  // interleaved with run_on_all, which still needs every thread
        std::vector<std::atomic<int>> all(static_cast<size_t>(threads));
        pool.run_on_all([&](int t) { all[size_t(t)]++; });
        for (int t = 0; t < threads; ++t) ASSERT_EQ(all[size_t(t)].load(), 1);
      }
    }
    EXPECT_THROW(pool.run_shared([](int t) {
      if (t == 0) throw std::runtime_error("caller");
    }),
                 std::runtime_error);
  }
}

TEST(ThreadPool, RunOnAllCallsEveryThreadOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 200; ++rep) {  // many dispatches: the spin and sleep paths
      std::vector<std::atomic<int>> hits(static_cast<size_t>(threads));
      pool.run_on_all([&](int t) { hits[size_t(t)]++; });
      for (int t = 0; t < threads; ++t) ASSERT_EQ(hits[size_t(t)].load(), 1);
      if (rep % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

TEST(ThreadPool, PropagatesExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run_on_all([](int t) {
    if (t == 1) throw std::runtime_error("worker");
  }),
               std::runtime_error);
  EXPECT_THROW(pool.run_on_all([](int t) {
    if (t == 0) throw std::runtime_error("caller");
  }),
               std::runtime_error);
  int calls = 0;
  pool.run_on_all([&](int) { __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED); });
  EXPECT_EQ(calls, 2);  // still usable
}

}  // namespace
}  // namespace nanovllm::cpu
