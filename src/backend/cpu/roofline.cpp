#include "backend/cpu/roofline.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/host_memory.h"
#include "util/check.h"

namespace nanovllm::cpu {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Sums 64-bit lanes of S equal consecutive parts of [p, p + bytes), read side by side (S
// sequential streams at once, kStep bytes of each in turn), into 8 independent accumulators.
// Nta: each stream prefetched with prefetchnta kStreamOnceAheadBytes ahead, as the GEMM's
// one-pass tiles do (gemm_internal.h; a prefetch past the end does not fault).
template <int S, bool Nta = false>
__attribute__((target("avx2"))) uint64_t read_sum(const uint8_t* p, size_t bytes) {
  constexpr size_t kStep = S >= 4 ? 64 : 256 / S;  // 8 loads an iteration, at least a line each
  __m256i acc[8];
  for (auto& a : acc) a = _mm256_setzero_si256();
  const size_t part = bytes / S / kStep * kStep;
  for (size_t off = 0; off < part; off += kStep)
    for (int s = 0; s < S; ++s) {
      if constexpr (Nta)
        for (size_t line = 0; line < kStep; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(p + size_t(s) * part + off + line +
                                                     detail::kStreamOnceAheadBytes),
                       _MM_HINT_NTA);
      for (size_t j = 0; j < kStep / 32; ++j) {
        __m256i& a = acc[(size_t(s) * (kStep / 32) + j) % 8];
        a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(
                                    p + size_t(s) * part + off + 32 * j)));
      }
    }
  for (int j = 1; j < 8; ++j) acc[0] = _mm256_add_epi64(acc[0], acc[j]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// Independent accumulators: more than latency x throughput, so the loop is throughput-bound.
// The loops are opaque to the optimizer (noipa): a call GCC could see as pure might be merged
// with an earlier one or moved across the clock reads that time it.
constexpr int kAcc = 24;

__attribute__((target("avx512f,avx512bf16"), noipa)) float dpbf16_loop(int64_t iters) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(float(j));
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1.0, 1.0)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x0d800d80);  // (2^-100, 2^-100): normal, tiny
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  for (int j = 1; j < kAcc; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  return lanes[0];
}

constexpr int kYmm = 12;

__attribute__((target("avx512f"), noipa)) float fma512_loop(int64_t iters) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(float(j));
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-30f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < kAcc; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  return lanes[0];
}

__attribute__((target("avx2,fma"), noipa)) float fma_loop(int64_t iters) {
  __m256 acc[kYmm];
  for (int j = 0; j < kYmm; ++j) acc[j] = _mm256_set1_ps(float(j));
  const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-30f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kYmm; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < kYmm; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  return lanes[0];
}

Ceiling summarize(std::vector<double> runs, std::string how) {
  std::sort(runs.begin(), runs.end());
  Ceiling c;
  c.runs = int(runs.size());
  c.best = runs.back();
  c.worst = runs.front();
  c.median = runs[runs.size() / 2];
  c.how = std::move(how);
  return c;
}

using ReadSum = uint64_t (*)(const uint8_t*, size_t);

// The read pass of `streams` (1, 2, 4 or 8; others round down) streams a thread, with the
// non-temporal prefetch or without.
ReadSum read_sum_for(int streams, bool nta) {
  constexpr ReadSum kSums[2][4] = {
      {read_sum<1>, read_sum<2>, read_sum<4>, read_sum<8>},
      {read_sum<1, true>, read_sum<2, true>, read_sum<4, true>, read_sum<8, true>}};
  return kSums[nta][streams >= 8 ? 3 : streams >= 4 ? 2 : streams >= 2 ? 1 : 0];
}

// "2 streams a thread" / "2 streams a thread, prefetchnta 512 B ahead".
std::string read_pattern_name(int streams, bool nta) {
  std::string s =
      std::to_string(streams) + (streams == 1 ? " stream a thread" : " streams a thread");
  if (nta) {
    s += ", prefetchnta ";
    s += std::to_string(detail::kStreamOnceAheadBytes);
    s += " B ahead";
  }
  return s;
}

// Pieces of at most kReadChunk bytes that a pass reads.
constexpr size_t kReadChunk = size_t(2) << 20;
struct Piece {
  const uint8_t* p;
  size_t bytes;
};

// One pass over `pieces` (`total` bytes) on every thread of the pool: GB/s. Threads claim pieces
// from a counter (as the GEMM does), so one thread that starts late does not stretch the pass.
double read_pass(ThreadPool& pool, const std::vector<Piece>& pieces, size_t total, ReadSum sum,
                 std::atomic<uint64_t>& sink) {
  std::atomic<size_t> next{0};
  const auto t0 = Clock::now();
  pool.run_on_all([&](int) {
    uint64_t s = 0;
    for (size_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < pieces.size();)
      s += sum(pieces[c].p, pieces[c].bytes);
    sink.fetch_add(s, std::memory_order_relaxed);
  });
  return double(total) / seconds_since(t0) / 1e9;
}

}  // namespace

Ceiling measure_read_bandwidth(ThreadPool& pool) {
  constexpr size_t kBytes = size_t(256) << 20;
  struct Free {
    void operator()(void* p) const { host_free(p, kBytes); }
  };
  // Memory as the backend's buffers have it (huge pages where the system grants them), so the
  // ceiling is the one the weights stream against.
  std::unique_ptr<void, Free> buf(host_alloc(kBytes));
  uint8_t* base = static_cast<uint8_t*>(buf.get());
  const int threads = pool.size();
  const size_t per = (kBytes / size_t(threads)) & ~size_t(255);
  // First touch on every thread (pages fault in here, not timed).
  pool.run_on_all([&](int t) { std::memset(base + per * size_t(t), t + 1, per); });
  std::vector<Piece> pieces;
  for (size_t c = 0; c < (per * size_t(threads)) / kReadChunk; ++c)
    pieces.push_back({base + c * kReadChunk, kReadChunk});
  const size_t total = pieces.size() * kReadChunk;
  std::atomic<uint64_t> sink{0};
  auto pass = [&](ReadSum sum) { return read_pass(pool, pieces, total, sum, sink); };  // ~5-10 ms
  struct Pattern {
    int streams;
    bool nta;
  };
  // Plain loads, and loads behind prefetchnta (how the GEMM's one-pass tiles read weights on
  // some kernels: measured faster on a first-generation Zen, gemm_internal.h).
  const Pattern patterns[] = {{1, false}, {2, false}, {4, false}, {8, false},
                              {1, true},  {2, true},  {4, true}};
  constexpr int kPatterns = int(std::size(patterns));
  // Patterns interleaved, 7 passes each: a burst of load from elsewhere spreads over all.
  std::vector<double> runs[kPatterns];
  for (int rep = 0; rep < 7; ++rep)
    for (int i = 0; i < kPatterns; ++i)
      runs[i].push_back(pass(read_sum_for(patterns[i].streams, patterns[i].nta)));
  int best = 0;
  for (int i = 1; i < kPatterns; ++i)
    if (*std::max_element(runs[i].begin(), runs[i].end()) >
        *std::max_element(runs[best].begin(), runs[best].end()))
      best = i;
  Ceiling c = summarize(runs[best], read_pattern_name(patterns[best].streams, patterns[best].nta));
  c.streams = patterns[best].streams;
  c.nta = patterns[best].nta;
  return c;
}

Ceiling measure_read_bandwidth_of(ThreadPool& pool, const std::vector<ByteRange>& ranges,
                                  int streams, bool nta) {
  const ReadSum sum = read_sum_for(streams, nta);
  // Pieces of at most 2 MiB, each a multiple of 512 bytes: read_sum reads all of such a piece
  // with any stream count (its streams' parts are multiples of its 64-256-byte steps).
  constexpr size_t kUnit = 512;
  std::vector<Piece> pieces;
  size_t total = 0;
  for (const ByteRange& r : ranges) {
    const auto* p = static_cast<const uint8_t*>(r.data);
    const size_t usable = r.bytes / kUnit * kUnit;
    for (size_t off = 0; off < usable; off += kReadChunk) {
      pieces.push_back({p + off, std::min(kReadChunk, usable - off)});
      total += pieces.back().bytes;
    }
  }
  NV_CHECK(total > 0, "measure_read_bandwidth_of: nothing to read ({} ranges)", ranges.size());
  std::atomic<uint64_t> sink{0};
  std::vector<double> runs;
  const auto start = Clock::now();
  while (runs.size() < 3 || (runs.size() < 7 && seconds_since(start) < 2.0))
    runs.push_back(read_pass(pool, pieces, total, sum, sink));
  char gb[32];
  std::snprintf(gb, sizeof gb, "%.4g GB in place, ", double(total) / 1e9);
  Ceiling c = summarize(std::move(runs), gb + read_pattern_name(streams, nta));
  c.streams = streams;
  c.nta = nta;
  return c;
}

namespace {

// The quantized GEMM's instructions, 12 a round on fixed registers (written in asm: GCC keeps
// integer vector arrays of such loops in memory, which halved the vpdpbusd figure). vpmaddwd /
// vpmaddubsw alone, results not fed back (the kernels' vpaddd / vpaddw run on other ports);
// vpdpbusd / vpdpwssd accumulate, 12 independent chains (latency 5, 2 a cycle). The values do
// not matter: integer instructions take the same time on any.
#define NV_DOT(INS, R, DST) INS " %%" R "1, %%" R "2, %%" R DST "\n\t"
#define NV_ROUND12(INS, R)                                                                        \
  NV_DOT(INS, R, "3") NV_DOT(INS, R, "4") NV_DOT(INS, R, "5") NV_DOT(INS, R, "6")                \
  NV_DOT(INS, R, "7") NV_DOT(INS, R, "8") NV_DOT(INS, R, "9") NV_DOT(INS, R, "10")               \
  NV_DOT(INS, R, "11") NV_DOT(INS, R, "12") NV_DOT(INS, R, "13") NV_DOT(INS, R, "14")
#define NV_CLOBBER12                                                                               \
  "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
      "xmm12", "xmm13", "xmm14"

enum class IntDot { Madd16, Maddubs, VexDpwssd, VexDpbusd, Dpwssd, Dpbusd };

__attribute__((noipa)) void int_dot_loop(IntDot op, int64_t iters) {
  for (int64_t i = 0; i < iters; ++i) {
    switch (op) {
      case IntDot::Madd16:
        asm volatile(NV_ROUND12("vpmaddwd", "ymm") ::: NV_CLOBBER12);
        break;
      case IntDot::Maddubs:
        asm volatile(NV_ROUND12("vpmaddubsw", "ymm") ::: NV_CLOBBER12);
        break;
      case IntDot::VexDpwssd:  // AVX-VNNI: the VEX form (a plain ymm one would be EVEX)
        asm volatile(NV_ROUND12("%{vex%} vpdpwssd", "ymm") ::: NV_CLOBBER12);
        break;
      case IntDot::VexDpbusd:
        asm volatile(NV_ROUND12("%{vex%} vpdpbusd", "ymm") ::: NV_CLOBBER12);
        break;
      case IntDot::Dpwssd:
        asm volatile(NV_ROUND12("vpdpwssd", "zmm") ::: NV_CLOBBER12);
        break;
      case IntDot::Dpbusd:
        asm volatile(NV_ROUND12("vpdpbusd", "zmm") ::: NV_CLOBBER12);
        break;
    }
  }
}
#undef NV_DOT
#undef NV_ROUND12
#undef NV_CLOBBER12

// The loop of the instruction isa's kernels run, and its FLOPs an iteration.
float peak_loop(GemmIsa isa, int64_t iters) {
  switch (isa) {
    case GemmIsa::AMX_BF16:
      return detail::amx_bf16_peak_loop(iters);
    case GemmIsa::AVX512_BF16:
      return dpbf16_loop(iters);
    case GemmIsa::AVX512_FMA:
      return fma512_loop(iters);
    case GemmIsa::AVX2:
      break;
  }
  return fma_loop(iters);
}

double peak_loop_flops(GemmIsa isa) {
  if (isa == GemmIsa::AMX_BF16) return 4.0 * 16 * 16 * 32 * 2;
  return isa == GemmIsa::AVX512_BF16 ? kAcc * 64.0 : isa == GemmIsa::AVX512_FMA ? kAcc * 32.0
                                                                                : kYmm * 16.0;
}

}  // namespace

bool bf16_dot_outruns_fma512() {
  // One thread, 3 alternating rounds of 0.02-0.08 ms a loop after a warm-up; the best of each. The
  // two differ by 2x or more where they differ at all (vdpbf16ps at half or at twice the FMA
  // rate in multiply-adds), far beyond this timing's noise.
  constexpr int64_t kIters = 1 << 12;
  volatile float sink = dpbf16_loop(kIters) + fma512_loop(kIters);
  double dot = 0, fma = 0;  // multiply-adds a second
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    sink = sink + dpbf16_loop(kIters);
    dot = std::max(dot, kAcc * 32.0 * kIters / seconds_since(t0));
    t0 = Clock::now();
    sink = sink + fma512_loop(kIters);
    fma = std::max(fma, kAcc * 16.0 * kIters / seconds_since(t0));
  }
  // The FMA kernels spend 2 widening instructions per 2 x 12 FMAs on top (gemm_avx512_fma.cpp).
  return dot > fma * 12.0 / 13.0;
}

namespace {

// The best of 15 timed passes of `loop` on every thread (after 4 untimed ones that ramp the
// clocks up), in G ops a second; `ops` per pass per thread. loop() or loop(thread).
template <class Loop>
Ceiling time_peak(ThreadPool& pool, double ops, Loop loop) {
  auto run = [&](int thread) {
    if constexpr (std::is_invocable_v<Loop&, int>)
      loop(thread);
    else
      loop();
  };
  for (int rep = 0; rep < 4; ++rep) pool.run_on_all(run);
  std::vector<double> runs;
  for (int rep = 0; rep < 15; ++rep) {
    auto t0 = Clock::now();
    pool.run_on_all(run);
    runs.push_back(ops * pool.size() / seconds_since(t0) / 1e9);
  }
  return summarize(std::move(runs), std::to_string(pool.size()) + " threads");
}

}  // namespace

Ceiling measure_gemm_peak(ThreadPool& pool, GemmIsa isa) {
  const int64_t iters = 1 << 16;  // ~5 ms a pass at a few GHz
  volatile float sink = 0.0f;
  return time_peak(pool, peak_loop_flops(isa) * double(iters),
                   [&] { sink = sink + peak_loop(isa, iters); });
}

Ceiling measure_gemm_tile(ThreadPool& pool, GemmIsa isa, int rows) {
  if (isa == GemmIsa::AMX_BF16) return {};  // its decode rows run other tiles
  const detail::KernelSet* ks = &detail::kernels_of(isa);
  if (!ks->tile_wide) return {};
  rows = std::clamp(rows, 1, ks->wide_max_rows);
  const int nb = ks->wide_nb(rows);
  constexpr int64_t kPairs = detail::kSumChunkPairs;  // k = 256: the x panel stays in L1
  constexpr int64_t kGroups = 2, kTiles = 1024;       // a pass: ~1-2 ms of tiles a thread
  const int64_t block_bytes = kPairs * detail::kBlockPairBytes;
  const auto pack_x = ks->wide_pack_x ? ks->wide_pack_x : ks->pack_x;
  const size_t pair_bytes = ks->wide_pack_x ? ks->wide_pair_bytes : ks->pair_bytes;
  const size_t x_bytes = size_t(kPairs) * size_t(rows) * pair_bytes;
  const size_t w_bytes = size_t(kGroups * nb * block_bytes);
  const size_t out_floats = size_t(rows) * 16 * size_t(nb);
  // Each thread's x panel, weights and outputs, one 64-byte aligned piece a thread.
  const size_t per_thread = (x_bytes + w_bytes + out_floats * 4 + 63) / 64 * 64;
  std::unique_ptr<uint8_t, void (*)(uint8_t*)> mem(
      nullptr, [](uint8_t* p) { ::operator delete(p, std::align_val_t(64)); });
  mem.reset(
      static_cast<uint8_t*>(::operator new(per_thread* size_t(pool.size()), std::align_val_t(64))));
  std::vector<float> x(size_t(rows) * 2 * kPairs);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) / 8.0f;
  for (int t = 0; t < pool.size(); ++t) {
    uint8_t* base = mem.get() + per_thread * size_t(t);
    pack_x(base, x.data(), 2 * kPairs, rows, 2 * kPairs, rows, 0, 1);
    uint8_t* w = base + x_bytes;
    for (size_t i = 0; i < w_bytes; i += 2) {  // bf16 in [-1, 1]: finite, normal
      const uint16_t v = uint16_t(0x3f00 + (i / 2) % 128) | uint16_t(i % 6 == 0 ? 0x8000 : 0);
      std::memcpy(w + i, &v, 2);
    }
  }
  return time_peak(pool, 4.0 * rows * 16 * nb * kPairs * double(kTiles), [&](int thread) {
    uint8_t* base = mem.get() + per_thread * size_t(thread);
    detail::Tile t{};
    t.x = base;
    t.xs = rows;
    t.w_block_stride = block_bytes;
    t.kpairs = kPairs;
    t.out = reinterpret_cast<float*>(base + x_bytes + w_bytes);
    t.ldo = 16 * nb;
    t.rows = rows;
    t.ncols = 16 * nb;
    t.first = true;
    t.prefetch = true;  // as gemm_wide's one-pass tiles do
    t.prefetch_nta = rows <= ks->one_pass_nta_max_rows;
    for (int64_t i = 0; i < kTiles; ++i) {
      t.w = base + x_bytes + (i % kGroups) * nb * block_bytes;
      ks->tile_wide(t);
    }
  });
}

Ceiling measure_qgemm_peak(ThreadPool& pool, QGemmIsa isa, QuantFormat format) {
  const bool int4 = format == QuantFormat::Int4;
  if (isa == QGemmIsa::AMX_INT8 && !int4) {
    // Each iteration: 2 tdpbssd + 2 tdpbusd on 16 x 16 tiles (the wide tiles batches of 32 rows
    // and more run; the 8-column ones below take as long an instruction for half the products),
    // 2 x 16 x 16 x 64 products of a 15-bit x code and an int8 weight (a high- and a low-byte
    // instruction each).
    const int64_t iters = 1 << 16;
    return time_peak(pool, 2.0 * 2 * 16 * 16 * 64 * double(iters),
                     [&] { detail::amx_int8_peak_loop(iters); });
  }
  if (isa == QGemmIsa::AMX_INT8) isa = QGemmIsa::AVX512_VNNI;  // int4 runs the VNNI tiles
  const bool vnni = isa == QGemmIsa::AVX512_VNNI;
  const IntDot op = vnni                        ? (int4 ? IntDot::Dpbusd : IntDot::Dpwssd)
                    : isa == QGemmIsa::AVX_VNNI ? (int4 ? IntDot::VexDpbusd : IntDot::VexDpwssd)
                                                : (int4 ? IntDot::Maddubs : IntDot::Madd16);
  // Ops (2 per multiply-add) a round of 12 instructions (the ymm VNNI ones: as many as the
  // AVX2 pair they replace, vpmaddubsw's 64 and vpmaddwd's 32).
  const double ops = 12.0 * (vnni ? (int4 ? 128.0 : 64.0) : (int4 ? 64.0 : 32.0));
  const int64_t iters = 1 << 17;  // 1.5 M instructions a pass: ~0.3-0.6 ms
  return time_peak(pool, ops * double(iters), [&] { int_dot_loop(op, iters); });
}

const char* qgemm_peak_name(QGemmIsa isa, QuantFormat format) {
  const bool int4 = format == QuantFormat::Int4;
  switch (isa) {
    case QGemmIsa::AMX_INT8:
      if (!int4) return "int16 x int8 products (AMX tdpbssd + tdpbusd, 16-column tiles)";
      [[fallthrough]];
    case QGemmIsa::AVX512_VNNI:
      return int4 ? "int8 dot (vpdpbusd zmm)" : "int16 dot (vpdpwssd zmm)";
    case QGemmIsa::AVX_VNNI:
      return int4 ? "int8 dot (vpdpbusd ymm, AVX-VNNI)" : "int16 dot (vpdpwssd ymm, AVX-VNNI)";
    case QGemmIsa::AVX2:
      break;
  }
  return int4 ? "int8 dot (vpmaddubsw ymm)" : "int16 dot (vpmaddwd ymm)";
}

const char* gemm_peak_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::AMX_BF16:
      return "bf16 tiles (AMX tdpbf16ps)";
    case GemmIsa::AVX512_BF16:
      return "bf16 dot (vdpbf16ps zmm)";
    case GemmIsa::AVX512_FMA:
      return "f32 FMA (vfmadd231ps zmm)";
    case GemmIsa::AVX2:
      break;
  }
  return "f32 FMA (vfmadd231ps ymm)";
}

std::string machine_load() {
  std::ifstream f("/proc/loadavg");
  double one = 0;
  std::string five, fifteen, running;
  if (!(f >> one >> five >> fifteen >> running)) return "load unknown";
  const size_t slash = running.find('/');
  char buf[128];
  std::snprintf(buf, sizeof buf, "load %.2f (1-minute average), %s running of %s tasks", one,
                running.substr(0, slash).c_str(),
                slash == std::string::npos ? "?" : running.substr(slash + 1).c_str());
  return buf;
}

std::string describe(const Ceiling& c, const char* unit) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.1f %s (best of %d runs; median %.1f, worst %.1f; %s)", c.best,
                unit, c.runs, c.median, c.worst, c.how.c_str());
  return buf;
}

}  // namespace nanovllm::cpu
