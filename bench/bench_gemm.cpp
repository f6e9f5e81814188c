// GEMM benchmark on the Qwen3-0.6B linear shapes, with napkin math: each shape at decode
// (M=1, 4, 8, 16, 32, 64: the weights streamed from memory; bound by the bandwidth at M = 1, by
// the multiply-add peak above a few rows) and prefill (M=512: bound by the peak), against this
// machine's ceilings measured in the same run. With --quant, the quantized GEMM (qgemm.h) on the
// same shapes, quantized at load as the engine does, against the integer dot product's peak.
//
//   bench_gemm [--threads N] [--avx2 | --isa avx2_fma|avx512_fma|avx512_bf16|amx_bf16]
//   bench_gemm --quant int8|int4|int4-g32|int4-g128 [--threads N] [--avx2 | --avxvnni | --avx512]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/roofline.h"
#include "runtime/quant.h"
#include "runtime/tensor.h"

using namespace nanovllm;
using namespace nanovllm::cpu;

namespace {

struct Free {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
};
using Mem = std::unique_ptr<void, Free>;
Mem alloc(size_t bytes) { return Mem(::operator new(bytes, std::align_val_t(64))); }

struct Shape {
  const char* name;
  int64_t n, k;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A kernel set by its gemm_isa_name, if this CPU runs it.
bool parse_isa(const std::string& name, GemmIsa* isa) {
  for (GemmIsa i : {GemmIsa::AVX2, GemmIsa::AVX512_FMA, GemmIsa::AVX512_BF16, GemmIsa::AMX_BF16}) {
    const bool runs = i == GemmIsa::AVX2          ? true
                      : i == GemmIsa::AVX512_FMA  ? cpu_has_avx512()
                      : i == GemmIsa::AVX512_BF16 ? cpu_has_avx512_bf16()
                                                  : cpu_has_amx_bf16();
    if (name == gemm_isa_name(i) && runs) {
      *isa = i;
      return true;
    }
  }
  return false;
}

// Bytes of weight copies a shape cycles through: 512 MiB, or four times the L3 where larger.
size_t cycled_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max<size_t>(size_t(512) << 20, l3 > 0 ? 4 * size_t(l3) : 0);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  GemmIsa isa = detect_gemm_isa();
  CpuIsa qwant = CpuIsa::Auto;
  QuantScheme quant;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--avx2") {
      isa = GemmIsa::AVX2;
      qwant = CpuIsa::AVX2;
    } else if (a == "--avxvnni") {  // the tiles of an AVX2 + AVX-VNNI CPU
      isa = GemmIsa::AVX2;
      qwant = CpuIsa::AVXVNNI;
    } else if (a == "--avx512") {  // the AVX-512 kernels, not AMX
      isa = select_gemm_isa(CpuIsa::AVX512);
      qwant = CpuIsa::AVX512;
    } else if (a == "--isa" && i + 1 < argc && parse_isa(argv[i + 1], &isa)) {
      ++i;
    } else if (a == "--quant" && i + 1 < argc) {
      try {
        quant = parse_quantization(argv[++i]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gemm: %s\n", e.what());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_gemm [--threads N] [--avx2 | --isa "
                   "avx2_fma|avx512_fma|avx512_bf16|amx_bf16]\n"
                   "       bench_gemm --quant int8|int4|int4-g32|int4-g128 [--threads N] [--avx2 | "
                   "--avxvnni | --avx512]\n");
      return 2;
    }
  }
  ThreadPool pool(threads);
  const QGemmIsa qisa = select_qgemm_isa(qwant);
  if (quant.enabled()) {
    std::printf("quantized kernels %s (%s), %d threads; %s\n", qgemm_isa_name(qisa),
                quantization_name(quant).c_str(), threads, machine_load().c_str());
  } else {
    std::printf("kernels %s, %d threads; %s\n", gemm_isa_name(isa), threads,
                machine_load().c_str());
  }
  const Ceiling bwc = measure_read_bandwidth(pool);
  const Ceiling peakc =
      quant.enabled() ? measure_qgemm_peak(pool, qisa, quant.format) : measure_gemm_peak(pool, isa);
  const double bw = bwc.best, peak = peakc.best;
  std::printf("read bandwidth: %s\n", describe(bwc, "GB/s").c_str());
  std::printf("%s peak: %s\n  (2 ops per multiply-add; the instructions these kernels run)\n",
              quant.enabled() ? qgemm_peak_name(qisa, quant.format) : gemm_peak_name(isa),
              describe(peakc, quant.enabled() ? "G ops/s" : "GFLOP/s").c_str());
  if (!quant.enabled()) {
    const Ceiling tile = measure_gemm_tile(pool, isa, 16);
    if (tile.runs > 0)
      std::printf("  its 16-sequence decode tile, weights in L1: %s, %.0f%% of that peak\n",
                  describe(tile, "GFLOP/s").c_str(), 100 * tile.best / peak);
  }
  std::printf("ridge point: %.0f ops per weight byte read\n\n", peak / bw);

  const Shape shapes[] = {{"qkv_proj", 4096, 1024},
                          {"o_proj", 1024, 2048},
                          {"gate_up_proj", 6144, 1024},
                          {"down_proj", 1024, 3072},
                          {"lm_head", 151936, 1024}};
  std::printf("%-13s %4s %6s %5s | %8s %8s %8s | %7s %5s | %8s %5s\n", "shape", "M", "N", "K",
              "best ms", "med ms", "bound ms", "GB/s", "%bw",
              quant.enabled() ? "G ops/s" : "GFLOP/s", "%pk");
  std::mt19937 rng(0);
  for (const Shape& s : shapes) {
    std::vector<uint16_t> w(size_t(s.n * s.k));
    for (auto& v : w) v = f32_to_bf16(std::uniform_real_distribution<float>(-1, 1)(rng));
    const QuantLayout layout = quant.enabled() ? quant_layout(quant, s.n, s.k) : QuantLayout{};
    const size_t wbytes = quant.enabled() ? layout.bytes() : packed_weight_bytes(s.n, s.k);
    // Enough copies that the weights cycled through exceed the LLC: decode reads from memory
    // as in a real step (28 layers of weights), not from a warm L3. Four times the L3 at least:
    // with 512 MiB over a 260 MiB L3 (Intel Xeon, family 6 model 207) one int4 row read at 152%
    // of the bandwidth, its replacement keeping part of the cycle.
    const int copies = int(std::max<size_t>(1, cycled_bytes() / wbytes));
    Mem packed = alloc(wbytes * size_t(copies));
    if (quant.enabled()) {
      const QuantizedWeight qw = quantize_rtn(w.data(), s.n, s.k, quant, s.name);
      pack_quantized_blocks(packed.get(), qw, layout, 0, layout.nblocks);
    } else {
      pack_weight(packed.get(), w.data(), s.n, s.k);
    }
    for (int c = 1; c < copies; ++c)
      std::memcpy(static_cast<uint8_t*>(packed.get()) + wbytes * size_t(c), packed.get(), wbytes);
    std::vector<uint16_t> bias(size_t(s.n), f32_to_bf16(0.5f));

    for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 512}) {
      if (m == 512 && s.n > 50000) continue;  // the engine runs lm_head on last tokens only
      std::vector<float> x(size_t(m * s.k));
      for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
      std::vector<float> out(size_t(m * s.n));
      GemmArgs a{out.data(), s.n, x.data(), s.k, packed.get(), nullptr, m, s.n, s.k};
      GemmScratch scratch;
      QGemmArgs qa{out.data(), s.n, x.data(), s.k, packed.get(), &layout, nullptr, m, &scratch};
      const auto run = [&](const void* wp) {
        if (quant.enabled()) {
          qa.packed_w = wp;
          qgemm(qa, pool, qisa);
        } else {
          a.packed_w = wp;
          gemm(a, pool, isa);
        }
      };
      run(packed.get());  // warm-up
      std::vector<double> times;
      double total = 0.0;
      for (int rep = 0; rep < 200 && (total < 0.3 || rep < 5); ++rep) {
        const void* wp = static_cast<uint8_t*>(packed.get()) + wbytes * size_t((rep + 1) % copies);
        double t0 = now_s();
        run(wp);
        double t = now_s() - t0;
        times.push_back(t);
        total += t;
      }
      std::sort(times.begin(), times.end());
      const double t = times[0], median = times[times.size() / 2];
      const double gbs = double(wbytes) / t / 1e9;
      const double gflops = 2.0 * double(m) * double(s.n) * double(s.k) / t / 1e9;
      const double bound =
          std::max(double(wbytes) / (bw * 1e9), 2.0 * m * s.n * s.k / (peak * 1e9));
      std::printf("%-13s %4lld %6lld %5lld | %8.3f %8.3f %8.3f | %7.1f %4.0f%% | %8.1f %4.0f%%\n",
                  s.name, (long long)m, (long long)s.n, (long long)s.k, t * 1e3, median * 1e3,
                  bound * 1e3, gbs, 100 * gbs / bw, gflops, 100 * gflops / peak);
    }
  }
  std::printf(
      "\nbest/med ms: fastest and median of repeated calls, weights cycled through copies of\n"
      ">= 512 MiB and 4x the L3 (decode reads them from memory, as a real step does). GB/s\n"
      "and GFLOP/s use the best time, like the best-of ceilings above; a median far above it\n"
      "means the machine was shared. bound ms: max(weight bytes / bandwidth, FLOPs / peak).\n");
  return 0;
}
