// The machine's read bandwidth now, as `nanovllm bench` measures it (best of 7 interleaved passes
// of 1, 2, 4 and 8 streams a thread over 256 MiB, and 1, 2, 4 behind prefetchnta), in a second or
// two and with no model. On a VM whose bandwidth moves between phases (this project's 2-core KVM
// guests: 35 against 60-68 GB/s, minutes apart), scripts/llama_cpp/side_by_side.sh probes before
// each llama.cpp run, so that each engine's memory-bound figures can be read against the bandwidth
// it ran under.
//
//   bench_probe [--threads N]   (one JSON line on stdout: read_gbs, median_gbs, worst_gbs, how)
//
// --regions GIB: whether this machine's memory is uniform. One buffer of GIB GiB (it must fit in
// free memory; on huge pages, as the weights are) is read as 256 MiB regions, each by itself
// (best of 3-7 passes), in 5 rounds that visit the regions in a different order each: a region
// whose rate stays low in every round sits on slower memory (on this project's 2-core EPYC VM
// some regions read at 14 GB/s and the rest at 20, round after round), which a model's weights
// may occupy where a fresh 256 MiB probe does not (nanovllm bench's "weights in place" ceiling).
//
//   bench_probe --regions 8 [--threads N]   (a line per region; then one JSON line: regions'
//                                             medians, min_gbs, median_gbs, max_gbs)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/host_memory.h"
#include "backend/cpu/roofline.h"
#include "backend/cpu/thread_pool.h"

namespace {

int probe_regions(nanovllm::cpu::ThreadPool& pool, double gib) {
  namespace cpu = nanovllm::cpu;
  constexpr size_t kRegion = size_t(256) << 20;
  constexpr int kRounds = 5;
  const size_t regions = size_t(gib * 4);
  const size_t bytes = regions * kRegion;
  auto* base = static_cast<uint8_t*>(cpu::host_alloc(bytes));
  const int threads = pool.size();
  pool.run_on_all([&](int t) {  // first touch, spread over the threads as the weights' packing is
    for (size_t r = size_t(t); r < regions; r += size_t(threads))
      std::memset(base + r * kRegion, 1, kRegion);
  });
  const cpu::Ceiling pattern = cpu::measure_read_bandwidth(pool);
  std::vector<std::vector<double>> gbs(regions);
  std::vector<size_t> order(regions);
  for (size_t r = 0; r < regions; ++r) order[r] = r;
  std::mt19937 rng(1);
  for (int round = 0; round < kRounds; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t r : order)
      gbs[r].push_back(cpu::measure_read_bandwidth_of(pool, {{base + r * kRegion, kRegion}},
                                                      pattern.streams, pattern.nta)
                           .best);
  }
  cpu::host_free(base, bytes);
  std::vector<double> medians;
  for (size_t r = 0; r < regions; ++r) {
    std::vector<double> v = gbs[r];
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
    std::fprintf(stderr, "region %3zu (%5.2f GiB): median %5.1f GB/s, rounds", r, double(r) / 4,
                 medians.back());
    for (double x : gbs[r]) std::fprintf(stderr, " %5.1f", x);
    std::fprintf(stderr, "\n");
  }
  std::string json = "{\"regions\": [";
  for (size_t r = 0; r < regions; ++r) {
    if (r) json += ", ";
    json += std::to_string(medians[r]);
  }
  std::vector<double> sorted = medians;
  std::sort(sorted.begin(), sorted.end());
  const double lo = sorted.front(), mid = sorted[sorted.size() / 2], hi = sorted.back();
  std::fprintf(stderr,
               "%zu regions of 256 MiB, read as the probe's best pattern (%s): medians %.1f "
               "(slowest) / %.1f / %.1f GB/s (fastest)\n",
               regions, pattern.how.c_str(), lo, mid, hi);
  std::printf("%s], \"min_gbs\": %.3f, \"median_gbs\": %.3f, \"max_gbs\": %.3f, \"threads\": %d}\n",
              json.c_str(), lo, mid, hi, threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  double regions_gib = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--regions") == 0 && i + 1 < argc) {
      char* end = nullptr;
      regions_gib = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(regions_gib >= 0.5)) {
        std::fprintf(stderr,
                     "bench_probe: --regions takes GiB, at least 0.5 (two regions); got '%s'\n",
                     argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: bench_probe [--threads N] [--regions GIB]\n");
      return 2;
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "bench_probe: --threads must be at least 1\n");
    return 2;
  }
  nanovllm::cpu::ThreadPool pool(threads);
  if (regions_gib != 0) {
    try {
      return probe_regions(pool, regions_gib);
    } catch (const std::exception& e) {  // host_alloc refused the buffer
      std::fprintf(stderr, "bench_probe: %s\n", e.what());
      return 1;
    }
  }
  const nanovllm::cpu::Ceiling c = nanovllm::cpu::measure_read_bandwidth(pool);
  std::fprintf(stderr, "read bandwidth %s\n", nanovllm::cpu::describe(c, "GB/s").c_str());
  std::printf(
      "{\"read_gbs\": %.3f, \"median_gbs\": %.3f, \"worst_gbs\": %.3f, \"threads\": %d, \"how\": "
      "\"%s\"}\n",
      c.best, c.median, c.worst, threads, c.how.c_str());
  return 0;
}
