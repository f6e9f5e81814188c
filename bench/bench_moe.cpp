// fused_moe on the CPU at Qwen3-30B-A3B's layer shape (H 2048, 128 experts of I 768, 8 a token)
// with napkin math: a step of T tokens reads the experts its tokens pick (each expert's gate_up
// [1536, 2048] and down [2048, 768] in bf16: 9.4 MB) and multiplies 3 x 2 x 768 x 2048 FLOP per
// (token, expert) pair; the figure is time against max(bytes / bandwidth, FLOPs / peak), both
// measured in this run. Routing is random (uniform over the experts), as make-model's routers are.
//
//   bench_moe [--threads N] [--int8]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/roofline.h"
#include "runtime/moe_routing.h"
#include "runtime/quant.h"

using namespace nanovllm;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  bool int8 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--int8") int8 = true;
    else { std::fprintf(stderr, "usage: bench_moe [--threads N] [--int8]\n"); return 2; }
  }
  const int64_t H = 2048, I = 768, E = 128, k = 8;
  cpu::CpuBackend be(threads);
  const double bw = cpu::measure_read_bandwidth_gbs(be.pool());
  const double peak = cpu::measure_bf16_peak_gflops(be.pool(), be.gemm_isa());
  std::printf("%s, %s experts; read bandwidth %.1f GB/s, peak %.1f GFLOP/s (measured now)\n",
              be.describe().c_str(), int8 ? "int8" : "bf16", bw, peak);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  MoeWeights w;
  auto make = [&](int64_t n, int64_t kk) {
    std::vector<uint16_t> bits(size_t(n * kk));
    for (auto& b : bits) b = f32_to_bf16(nd(rng));
    if (int8) return be.make_quantized_linear_weight(quantize_rtn(bits.data(), n, kk, {QuantFormat::Int8, 0}, "w"));
    return be.make_linear_weight(Tensor::contiguous(bits.data(), DType::BF16, {n, kk}, DeviceKind::CPU));
  };
  for (int64_t e = 0; e < E; ++e) {
    w.gate_up.push_back(make(2 * I, H));
    w.down.push_back(make(H, I));
  }
  const double expert_bytes = double(3 * I * H) * (int8 ? 1.0 : 2.0);
  std::printf("%6s %8s %10s %10s %10s %8s\n", "tokens", "experts", "ms", "GB/s", "GFLOP/s", "of bound");
  for (int64_t T : {1, 4, 16, 32, 64, 512}) {
    std::vector<float> x(size_t(T * H)), logits(size_t(T * E)), out(size_t(T * H));
    std::normal_distribution<float> unit(0.0f, 1.0f);
    for (float& v : x) v = unit(rng);
    for (float& v : logits) v = unit(rng);
    std::set<int32_t> used;  // the experts this step reads
    for (int64_t t = 0; t < T; ++t) {
      int32_t ids[8];
      float wts[8];
      moe_route(&logits[size_t(t * E)], int(E), int(k), true, ids, wts);
      used.insert(ids, ids + k);
    }
    auto run = [&] {
      be.fused_moe(Tensor::contiguous(out.data(), DType::F32, {T, H}, DeviceKind::CPU),
                   Tensor::contiguous(x.data(), DType::F32, {T, H}, DeviceKind::CPU),
                   Tensor::contiguous(logits.data(), DType::F32, {T, E}, DeviceKind::CPU), w, int(k), true);
    };
    run();
    const int reps = T >= 512 ? 3 : 10;
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const double t0 = now_s();
      run();
      best = std::min(best, now_s() - t0);
    }
    const double bytes = double(used.size()) * expert_bytes, flops = 2.0 * 3 * I * H * T * k;
    const double bound = std::max(bytes / (bw * 1e9), flops / (peak * 1e9));
    std::printf("%6ld %8zu %10.3f %10.1f %10.1f %7.0f%%\n", long(T), used.size(), best * 1e3,
                bytes / best / 1e9, flops / best / 1e9, 100 * bound / best);
  }
  return 0;
}
