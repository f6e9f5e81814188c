// The instruction ceilings `nanovllm bench` divides by (roofline.h): each measured loop runs and
// reports a positive rate whose spread is ordered, and each kernel set names its own instruction.
#include "backend/cpu/roofline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace nanovllm::cpu {
namespace {

void expect_sane(const Ceiling& c, const std::string& what) {
  EXPECT_GT(c.worst, 0.0) << what;
  EXPECT_LE(c.worst, c.median) << what;
  EXPECT_LE(c.median, c.best) << what;
  EXPECT_EQ(c.runs, 15) << what;
}

TEST(Roofline, GemmPeaksOfEveryKernelSet) {
  ThreadPool pool(1);
  std::vector<GemmIsa> isas = {GemmIsa::AVX2};
  if (cpu_has_avx512()) isas.push_back(GemmIsa::AVX512_FMA);
  if (cpu_has_avx512_bf16()) isas.push_back(GemmIsa::AVX512_BF16);
  for (GemmIsa isa : isas) {
    const Ceiling c = measure_gemm_peak(pool, isa);
    expect_sane(c, gemm_isa_name(isa));
    std::printf("%s: %s\n", gemm_peak_name(isa), describe(c, "GFLOP/s").c_str());
  }
  EXPECT_EQ(std::string(gemm_peak_name(GemmIsa::AVX2)), "f32 FMA (vfmadd231ps ymm)");
  EXPECT_EQ(std::string(gemm_peak_name(GemmIsa::AVX512_FMA)), "f32 FMA (vfmadd231ps zmm)");
  EXPECT_EQ(std::string(gemm_peak_name(GemmIsa::AVX512_BF16)), "bf16 dot (vdpbf16ps zmm)");
}

TEST(Roofline, QuantizedPeaksOfEveryKernelSet) {
  ThreadPool pool(1);
  std::vector<QGemmIsa> isas = {QGemmIsa::AVX2};
  if (select_qgemm_isa(CpuIsa::Auto) == QGemmIsa::AVX512_VNNI) isas.push_back(QGemmIsa::AVX512_VNNI);
  for (QGemmIsa isa : isas) {
    for (QuantFormat f : {QuantFormat::Int8, QuantFormat::Int4}) {
      const Ceiling c = measure_qgemm_peak(pool, isa, f);
      expect_sane(c, qgemm_peak_name(isa, f));
      std::printf("%s: %s\n", qgemm_peak_name(isa, f), describe(c, "G ops/s").c_str());
    }
  }
  EXPECT_EQ(std::string(qgemm_peak_name(QGemmIsa::AVX512_VNNI, QuantFormat::Int4)),
            "int8 dot (vpdpbusd zmm)");
  EXPECT_EQ(std::string(qgemm_peak_name(QGemmIsa::AVX2, QuantFormat::Int8)),
            "int16 dot (vpmaddwd ymm)");
}

}  // namespace
}  // namespace nanovllm::cpu
