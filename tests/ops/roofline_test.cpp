// The instruction ceilings `nanovllm bench` divides by (roofline.h): each measured loop runs and
// reports a positive rate whose spread is ordered, and each kernel set names its own instruction.
#include "backend/cpu/roofline.h"

#include <gtest/gtest.h>

#include <cstdint>
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

// The bf16 kernel sets this CPU runs, AMX aside.
std::vector<GemmIsa> gemm_isas_here() {
  std::vector<GemmIsa> isas = {GemmIsa::AVX2};
  if (cpu_has_avx512()) isas.push_back(GemmIsa::AVX512_FMA);
  if (cpu_has_avx512_bf16()) isas.push_back(GemmIsa::AVX512_BF16);
  return isas;
}

TEST(Roofline, GemmPeaksOfEveryKernelSet) {
  ThreadPool pool(1);
  for (GemmIsa isa : gemm_isas_here()) {
    const Ceiling c = measure_gemm_peak(pool, isa);
    expect_sane(c, gemm_isa_name(isa));
    std::printf("%s: %s\n", gemm_peak_name(isa), describe(c, "GFLOP/s").c_str());
  }
  EXPECT_EQ(std::string(gemm_peak_name(GemmIsa::AVX2)), "f32 FMA (vfmadd231ps ymm)");
  EXPECT_EQ(std::string(gemm_peak_name(GemmIsa::AVX512_FMA)), "f32 FMA (vfmadd231ps zmm)");
  EXPECT_EQ(std::string(gemm_peak_name(GemmIsa::AVX512_BF16)), "bf16 dot (vdpbf16ps zmm)");
}

// The decode tile over L1-resident weights: a rate no faster than the multiply-add instruction
// it is made of (a FLOP miscount, e.g. one that forgot the odd k of each pair or counted
// columns past the tile, would read 2x or more above it), and the clamp to the set's tallest
// tile.
TEST(Roofline, DecodeTileRunsBelowItsInstructionPeak) {
  ThreadPool pool(1);
  for (GemmIsa isa : gemm_isas_here()) {
    for (int rows : {1, 16, 1000}) {
      const Ceiling tile = measure_gemm_tile(pool, isa, rows);
      const Ceiling peak = measure_gemm_peak(pool, isa);
      const std::string what =
          std::string(gemm_isa_name(isa)) + ", " + std::to_string(rows) + " rows";
      expect_sane(tile, what);
      // The best tile pass against the best peak pass; 1.15: the two measured at different
      // moments of a shared machine.
      EXPECT_LT(tile.best, 1.15 * peak.best) << what;
      std::printf("%s: %s (peak %.1f)\n", what.c_str(), describe(tile, "GFLOP/s").c_str(),
                  peak.best);
    }
  }
  EXPECT_EQ(measure_gemm_tile(pool, GemmIsa::AMX_BF16).runs, 0);
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

// The read probe's best pattern (plain loads, or loads behind prefetchnta) is the one it names
// and the one the in-place read repeats: a decode's ceiling read the way its kernels read.
TEST(Roofline, ReadProbeNamesThePatternItRead) {
  ThreadPool pool(2);
  const Ceiling c = measure_read_bandwidth(pool);
  EXPECT_GT(c.worst, 0.0);
  EXPECT_LE(c.worst, c.median);
  EXPECT_LE(c.median, c.best);
  EXPECT_EQ(c.runs, 7);
  EXPECT_TRUE(c.streams == 1 || c.streams == 2 || c.streams == 4 || c.streams == 8) << c.streams;
  const std::string plain =
      std::to_string(c.streams) + (c.streams == 1 ? " stream a thread" : " streams a thread");
  EXPECT_EQ(c.how, c.nta ? plain + ", prefetchnta 512 B ahead" : plain);
  EXPECT_FALSE(c.nta && c.streams == 8) << "no 8-stream prefetchnta pattern is measured";
  std::printf("read: %s\n", describe(c, "GB/s").c_str());

  // 3 MiB + 100 bytes in two ranges: read as 2 MiB pieces and a 1 MiB one, the 100-byte tail
  // left out; the pattern passed is the one named.
  const size_t bytes = (size_t(3) << 20) + 100;
  std::vector<uint8_t> buf(bytes + 64, 1);
  auto* base =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
  for (const bool nta : {false, true}) {
    const Ceiling in_place = measure_read_bandwidth_of(
        pool, {{base, size_t(2) << 20}, {base + (size_t(2) << 20), (size_t(1) << 20) + 100}}, 4,
        nta);
    EXPECT_GT(in_place.worst, 0.0);
    EXPECT_LE(in_place.median, in_place.best);
    EXPECT_GE(in_place.runs, 3);
    EXPECT_LE(in_place.runs, 7);
    EXPECT_EQ(in_place.streams, 4);
    EXPECT_EQ(in_place.nta, nta);
    EXPECT_EQ(in_place.how, std::string("0.003146 GB in place, 4 streams a thread") +
                                (nta ? ", prefetchnta 512 B ahead" : ""));
  }
}

}  // namespace
}  // namespace nanovllm::cpu
