// Where a batched decode step's GEMM time goes: the kernel set's wide register tile (the tile a
// decode batch of M rows runs: M rows x the 16-column blocks that fit the registers, one pass
// over K) streaming weight blocks that lie in L1, in L2, in L3 or in memory, on one thread and on
// every thread of the pool, in interleaved rounds. Each figure is against the peak of the set's
// multiply-add instruction on the same thread count, measured in every round (the best of the
// rounds' medians), with the weight bytes a second it implies; the memory
// rows also against reading the same bytes with one sequential stream a thread (the tile's own
// access pattern) and with the probe's best pattern. A tile as fast from memory as from L1 is
// held by its instructions; one slower from memory than the one-stream read would allow is held
// by how its reads overlap its multiply-adds.
//
//   bench_tile [--rows M] [--k K] [--threads N] [--rounds R] [--isa
//   avx2_fma|avx512_fma|avx512_bf16]
//     M: 1..the set's wide tile height (default 16, the 16-sequence decode's tile, or the height
//     where lower: 6 on AVX2, whose decode batches run several such passes over each weight
//     block); K: the weights' depth (default 256: one summation chunk of 128 k pairs, 8 KiB a
//     16-column block, whose x panel stays in L1; 1024 / 2048 / 3072: Qwen3-0.6B's linears,
//     whose 16-row x panel does not); R rounds (default 5) of every (level, thread count).
//
// Every tile runs over the whole K (--k) and does what gemm_wide does for a one-pass batch: the
// near-ahead software prefetch of its weight streams, stores of its outputs. The levels' sizes come
// from sysconf: a thread's own two column groups ("L1": 16 KiB at K = 256 with one block a
// tile; at K = 1,024 already 64 KiB, so L2), half its L2, half the L3 over the threads, and 4x
// the L3 (at least 512 MiB) over the threads, walked in order, every pass continuing where the
// last stopped.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/host_memory.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/roofline.h"
#include "backend/cpu/thread_pool.h"
#include "runtime/tensor.h"

using namespace nanovllm;
using namespace nanovllm::cpu;

namespace {

constexpr int64_t kPassBytes = int64_t(256) << 20;  // weights a pass, over all threads

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t cache_bytes(int name, int64_t fallback) {
  const long v = sysconf(name);
  return v > 0 ? int64_t(v) : fallback;
}

// One thread's weights at a level: `groups` groups of nb blocks from `w`, and where its next
// pass starts.
struct Region {
  const uint8_t* w = nullptr;
  int64_t groups = 0;
  int64_t cursor = 0;
};

struct Level {
  const char* name;
  int64_t bytes;  // a thread's own (L1, L2), or all threads' (shared: L3, memory)
  bool shared;
};

struct Figure {
  std::vector<double> gflops;
  void add(double v) { gflops.push_back(v); }
  double best() const { return *std::max_element(gflops.begin(), gflops.end()); }
  double median() const {
    std::vector<double> s = gflops;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rows = 0, rounds = 5;  // rows 0: min(16, the wide tile height)
  int64_t k = 256;
  GemmIsa isa = detect_gemm_isa();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--rows" && i + 1 < argc) {
      rows = std::atoi(argv[++i]);
    } else if (a == "--k" && i + 1 < argc) {
      k = std::atoll(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--isa" && i + 1 < argc) {
      const std::string n = argv[++i];
      bool found = false;
      for (GemmIsa g : {GemmIsa::AVX2, GemmIsa::AVX512_FMA, GemmIsa::AVX512_BF16}) {
        const bool runs = g == GemmIsa::AVX2         ? true
                          : g == GemmIsa::AVX512_FMA ? cpu_has_avx512()
                                                     : cpu_has_avx512_bf16();
        if (n == gemm_isa_name(g) && runs) {
          isa = g;
          found = true;
        }
      }
      if (!found) {
        std::fprintf(stderr, "bench_tile: --isa %s: not a kernel set this CPU runs\n", n.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_tile [--rows M] [--k K] [--threads N] [--rounds R] [--isa "
                   "avx2_fma|avx512_fma|avx512_bf16]\n");
      return 2;
    }
  }
  // AMX: its decode rows run other tiles (gemm_amx_rows.cpp).
  const detail::KernelSet* ks = isa == GemmIsa::AMX_BF16 ? nullptr : &detail::kernels_of(isa);
  if (!ks || !ks->tile_wide) {
    std::fprintf(stderr, "bench_tile: the %s kernels have no wide tiles (try --isa)\n",
                 gemm_isa_name(isa));
    return 2;
  }
  if (rows == 0) rows = std::min(16, ks->wide_max_rows);
  if (threads < 1 || rounds < 1 || rows < 1 || rows > ks->wide_max_rows || k < 256 ||
      k % 256 != 0) {
    std::fprintf(stderr,
                 "bench_tile: --threads and --rounds >= 1, --rows 1..%d, --k a multiple of 256\n",
                 ks->wide_max_rows);
    return 2;
  }
  const int64_t pairs = k / 2;                                  // k pairs a tile
  const int64_t block_bytes = pairs * detail::kBlockPairBytes;  // bytes of a 16-column block
  const int nb = ks->wide_nb(rows);
  const int64_t group_bytes = nb * block_bytes;

  ThreadPool pool1(1), pool(threads);
  std::printf("kernels %s, wide tile %d rows x %d block%s (%d columns), K = %lld; %s\n",
              gemm_isa_name(isa), rows, nb, nb == 1 ? "" : "s", 16 * nb, (long long)k,
              machine_load().c_str());

  // x: one packed panel of `rows` rows over pairs pairs, as gemm_wide packs it.
  const auto pack_x = ks->wide_pack_x ? ks->wide_pack_x : ks->pack_x;
  const size_t pair_bytes = ks->wide_pack_x ? ks->wide_pair_bytes : ks->pair_bytes;
  std::mt19937 rng(0);
  std::vector<float> x(size_t(rows) * 2 * pairs);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<uint8_t*> xp(static_cast<size_t>(threads));
  std::vector<std::vector<float>> out(size_t(threads), std::vector<float>(size_t(rows) * 16 * nb));
  for (auto& p : xp) {
    p = static_cast<uint8_t*>(host_alloc(size_t(pairs) * rows * pair_bytes));
    pack_x(p, x.data(), 2 * pairs, rows, 2 * pairs, rows, 0, 1);
  }

  const int64_t l2 = cache_bytes(_SC_LEVEL2_CACHE_SIZE, 1 << 20);
  const int64_t l3 = cache_bytes(_SC_LEVEL3_CACHE_SIZE, 32 << 20);
  const int64_t mem = std::max<int64_t>(int64_t(512) << 20, 4 * l3);
  const Level levels[] = {{"L1", 2 * group_bytes, false},
                          {"L2", l2 / 2, false},
                          {"L3", l3 / 2, true},
                          {"memory", mem, true}};
  // Each level's weights: one buffer, every thread's regions in it (per pool size).
  struct Buffers {
    uint8_t* data;
    size_t bytes;
    std::vector<Region> one, all;  // regions for 1 thread, for `threads`
  };
  std::vector<Buffers> bufs;
  for (const Level& lv : levels) {
    const int64_t per = lv.shared ? lv.bytes : lv.bytes * threads;
    const int64_t groups = std::max<int64_t>(threads, per / group_bytes);
    Buffers b{static_cast<uint8_t*>(host_alloc(size_t(groups * group_bytes))),
              size_t(groups * group_bytes),
              {},
              {}};
    for (size_t i = 0; i < b.bytes; i += 2) {  // bf16 in [-1, 1): finite, normal
      const uint16_t v = f32_to_bf16(float(int(i % 2000) - 1000) / 1000.0f);
      std::memcpy(b.data + i, &v, 2);
    }
    const int64_t one_groups = lv.shared ? groups : groups / threads;
    b.one.push_back({b.data, one_groups, 0});
    for (int t = 0; t < threads; ++t) {
      const int64_t g0 = groups * t / threads, g1 = groups * (t + 1) / threads;
      b.all.push_back({b.data + g0 * group_bytes, g1 - g0, 0});
    }
    bufs.push_back(std::move(b));
  }

  // One thread's share of a pass: `tiles` tiles over its region, from its cursor on.
  auto walk = [&](Region& r, int thread, int64_t tiles) {
    detail::Tile t{};
    t.x = xp[size_t(thread)];
    t.xs = rows;
    t.w_block_stride = block_bytes;
    t.kpairs = pairs;
    t.out = out[size_t(thread)].data();
    t.ldo = 16 * nb;
    t.rows = rows;
    t.ncols = 16 * nb;
    t.first = true;
    t.prefetch = true;
    t.prefetch_nta = rows <= ks->one_pass_nta_max_rows;
    for (int64_t i = 0; i < tiles; ++i) {
      t.w = r.w + r.cursor * group_bytes;
      ks->tile_wide(t);
      r.cursor = (r.cursor + 1) % r.groups;
    }
  };
  const int64_t pass_tiles = kPassBytes / group_bytes;  // per pass, over all threads
  const double pass_flops = 2.0 * rows * 16 * nb * 2 * pairs * double(pass_tiles);
  std::vector<Figure> fig(2 * std::size(levels));
  Figure peak[2];  // the FMA peak probe's median in each round: 1 thread, all threads
  for (int round = 0; round < rounds; ++round) {
    peak[0].add(measure_gemm_peak(pool1, isa).median);
    peak[1].add(measure_gemm_peak(pool, isa).median);
    for (size_t l = 0; l < std::size(levels); ++l) {
      for (int all = 0; all < 2; ++all) {
        Buffers& b = bufs[l];
        const double t0 = now_s();
        if (all) {
          pool.run_on_all([&](int th) { walk(b.all[size_t(th)], th, pass_tiles / threads); });
        } else {
          walk(b.one[0], 0, pass_tiles);
        }
        const double s = now_s() - t0;
        const double flops =
            all ? pass_flops / pass_tiles * double(pass_tiles / threads * threads) : pass_flops;
        fig[2 * l + size_t(all)].add(flops / s / 1e9);
      }
    }
  }

  const Buffers& membuf = bufs.back();
  const Ceiling one1 = measure_read_bandwidth_of(pool1, {{membuf.data, membuf.bytes}}, 1);
  const Ceiling onen = measure_read_bandwidth_of(pool, {{membuf.data, membuf.bytes}}, 1);
  const Ceiling probe1 = measure_read_bandwidth(pool1), proben = measure_read_bandwidth(pool);
  std::printf(
      "%s peak, the probe's median of 15 short runs in each round: 1 thread best %.1f, median "
      "%.1f GFLOP/s;\n  %d threads best %.1f, median %.1f\n",
      gemm_peak_name(isa), peak[0].best(), peak[0].median(), threads, peak[1].best(),
      peak[1].median());
  std::printf("the memory level's bytes, one stream a thread: 1 thread %s\n  %d threads %s\n",
              describe(one1, "GB/s").c_str(), threads, describe(onen, "GB/s").c_str());
  std::printf("read bandwidth probe: 1 thread %s\n  %d threads %s\n\n",
              describe(probe1, "GB/s").c_str(), threads, describe(proben, "GB/s").c_str());
  const double flops_per_byte = 2.0 * rows / 2.0;  // 2 FLOPs per multiply-add, 2 bytes a weight
  std::printf("%-7s %12s %7s | %9s %9s %6s | %10s\n", "weights", "bytes", "threads", "best",
              "median", "%peak", "weight GB/s");
  for (size_t l = 0; l < std::size(levels); ++l) {
    for (int all = 0; all < 2; ++all) {
      const Figure& f = fig[2 * l + size_t(all)];
      const double pk = peak[all].best();
      const size_t bytes = bufs[l].bytes;
      const bool mib = bytes >= (size_t(1) << 20);
      std::printf("%-7s %9.1f %s %7d | %9.1f %9.1f %5.0f%% | %10.1f\n", levels[l].name,
                  double(bytes) / (mib ? 1048576.0 : 1024.0), mib ? "MiB" : "KiB",
                  all ? threads : 1, f.best(), f.median(), 100 * f.best() / pk,
                  f.best() / flops_per_byte);
    }
  }
  std::printf(
      "\nGFLOP/s of the tile (2 per multiply-add), best and median of %d interleaved rounds of "
      "%lld MiB\nof weights each; weight GB/s: the best figure's bytes a second (%.0f FLOPs a "
      "byte at %d rows).\n",
      rounds, (long long)(kPassBytes >> 20), flops_per_byte, rows);
  for (auto* p : xp) host_free(p, size_t(pairs) * rows * pair_bytes);
  for (auto& b : bufs) host_free(b.data, b.bytes);
  return 0;
}
