// Sampler benchmark on Qwen3's vocabulary (151,936 logits per row): microseconds per row for
// greedy, temperature alone, and Qwen3's generation defaults (temperature 0.6, top_k 20,
// top_p 0.95), at 1 and 16 rows per call, with napkin math: the logits read (4 bytes per
// entry) against the measured read bandwidth, and the row's share of a decode step that reads
// Qwen3-0.6B's 1.19 GB of weights at that bandwidth.
//
//   bench_sampler [--threads N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/roofline.h"
#include "runtime/forward_batch.h"
#include "runtime/tensor.h"

using namespace nanovllm;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Setting {
  const char* name;
  float temperature;
  int top_k;
  float top_p;
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
  }
  const int64_t vocab = 151936;
  cpu::CpuBackend be(threads);
  cpu::ThreadPool pool(threads);
  const double bw = cpu::measure_read_bandwidth_gbs(pool);
  const double step_s = 1.192 / bw;  // Qwen3-0.6B decode step at this bandwidth
  std::printf("sampler, vocab %lld, %d threads; read bandwidth %.1f GB/s (a 1.19 GB decode step: %.1f ms)\n",
              (long long)vocab, threads, bw, step_s * 1e3);
  std::printf("| setting | rows | us per row | logits GB/s | %% of bandwidth | share of a decode step |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const Setting settings[] = {{"greedy", 0.0f, 0, 1.0f},
                              {"temperature 0.6", 0.6f, 0, 1.0f},
                              {"qwen3 defaults (0.6, top_k 20, top_p 0.95)", 0.6f, 20, 0.95f}};
  for (int64_t rows : {1, 16}) {
    std::vector<float> logits(size_t(rows * vocab));
    for (float& x : logits) x = dist(rng);
    for (const Setting& s : settings) {
      HostBatch hb;
      for (int64_t b = 0; b < rows; ++b) {
        hb.temperatures.push_back(s.temperature);
        hb.top_k.push_back(s.top_k);
        hb.top_p.push_back(s.top_p);
        hb.seeds.push_back(uint64_t(b) + 1);
        hb.sample_offsets.push_back(0);
      }
      ForwardBatch batch;
      batch.host = &hb;
      batch.num_seqs = int(rows);
      std::vector<int32_t> out(static_cast<size_t>(rows));
      Tensor o = Tensor::contiguous(out.data(), DType::I32, {rows});
      Tensor l = Tensor::contiguous(logits.data(), DType::F32, {rows, vocab});
      be.sample(o, l, batch);  // warm-up
      int iters = 0;
      const double t0 = now_s();
      double t = t0;
      while (t - t0 < 0.5 || iters < 3) {
        for (int64_t b = 0; b < rows; ++b) hb.sample_offsets[size_t(b)] = iters;
        be.sample(o, l, batch);
        ++iters;
        t = now_s();
      }
      const double per_call = (t - t0) / iters, per_row = per_call / double(rows);
      const double gbs = double(rows * vocab * 4) / per_call / 1e9;
      std::printf("| %s | %lld | %.1f | %.1f | %.0f%% | %.1f%% |\n", s.name, (long long)rows,
                  per_row * 1e6, gbs, 100 * gbs / bw, 100 * per_call / step_s);
    }
  }
  return 0;
}
