// The machine's read bandwidth now, as `nanovllm bench` measures it (best of 7 interleaved passes
// of 1, 2, 4 and 8 streams a thread over 256 MiB), in a second or two and with no model. On a VM
// whose bandwidth moves between phases (this project's 2-core KVM guests: 35 against 60-68 GB/s,
// minutes apart), scripts/llama_cpp/side_by_side.sh probes before each llama.cpp run, so that
// each engine's memory-bound figures can be read against the bandwidth it ran under.
//
//   bench_probe [--threads N]   (one JSON line on stdout: read_gbs, median_gbs, worst_gbs, how)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/roofline.h"
#include "backend/cpu/thread_pool.h"

int main(int argc, char** argv) {
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_probe [--threads N]\n");
      return 2;
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "bench_probe: --threads must be at least 1\n");
    return 2;
  }
  nanovllm::cpu::ThreadPool pool(threads);
  const nanovllm::cpu::Ceiling c = nanovllm::cpu::measure_read_bandwidth(pool);
  std::fprintf(stderr, "read bandwidth %s\n", nanovllm::cpu::describe(c, "GB/s").c_str());
  std::printf(
      "{\"read_gbs\": %.3f, \"median_gbs\": %.3f, \"worst_gbs\": %.3f, \"threads\": %d, \"how\": "
      "\"%s\"}\n",
      c.best, c.median, c.worst, threads, c.how.c_str());
  return 0;
}
