// The GEMM driver: weight packing, x packing, cache blocking and threading around the ISA
// register tiles of gemm_avx512.cpp / gemm_avx512_fma.cpp / gemm_avx2.cpp (layouts in
// gemm_internal.h).
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/roofline.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm::cpu {

using detail::kBlockCols;
using detail::kBlockPairBytes;

namespace {

// k pairs per cache block: a 4-block weight panel of 128 pairs is 32 KiB (L1-resident while
// every x panel of the M block streams past it).
constexpr int64_t kKcPairs = detail::kSumChunkPairs;
static_assert(kKcPairs % detail::kSumChunkPairs == 0, "k blocks must start on summation chunks");
// The blocked path widens a weight panel to f32 once for an M block of at least this many x
// panels (KernelSet::widen_panel), whose tiles then multiply-add without widening (a 12 x 2
// AVX-512 tile spends 4 widening instructions per 48 FMAs on the FMA ports, a 6-row AVX2 one 4
// per 24). The copy costs up to a third of a tile (its stores), and on cores that run the
// widening beside the FMAs (Zen 3: the same tile rate from L1 either way) it gains nothing, so
// it waits for 12 panels: at most ~3% there, and never on a 512 KiB L2 (Zen 2 / 3), whose M
// blocks hold 10 panels at K = 1,024. On Intel cores with 1.25-2 MiB of L2 the K = 1,024 shapes
// (both sets) and all of Qwen3-0.6B's on AVX2 take it. Measured on an Intel Xeon (family 6 model
// 207, 2 threads), with and without alternating in one process, medians GFLOP/s on Qwen3-0.6B's qkv
// / o_proj / gate_up / down_proj: avx512_fma M = 2,048 (20 rounds) 274 / 262 / 255 / 190 -> 283 /
// 267 / 260 / 189, M = 512 (30 rounds) 264 / 270 / 272 / 271 -> 276 / 275 / 284 / 271; the AVX2
// kernels (NANOVLLM_CPU_ISA=avx2) M = 2,048 (12 rounds) 134 / 127 / 128 / 131 -> 140 / 137 / 137 /
// 132 (all with a threshold of 4; at 12 o_proj and down_proj on avx512_fma, M blocks of 10 and 7
// panels on that 2 MiB L2, keep the tiles' own widening). One thread, one 12 x 2 tile over
// L1-resident weights: 146-148 -> 155-158 GFLOP/s (the AVX2 6 x 1 tile 72-74 -> 80-81).
constexpr int64_t kWidenMinPanels = 12;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
};
using AlignedPtr = std::unique_ptr<void, AlignedFree>;
AlignedPtr aligned_alloc64(size_t bytes) {
  return AlignedPtr(::operator new(std::max<size_t>(bytes, 64), std::align_val_t(64)));
}

// The packed-x buffer of one call: the caller's scratch, or one of its own.
struct PackedX {
  AlignedPtr owned;
  void* data = nullptr;
  PackedX(GemmScratch* scratch, size_t bytes) {
    if (scratch) {
      data = scratch->reserve(bytes);
    } else {
      owned = aligned_alloc64(bytes);
      data = owned.get();
    }
  }
  void* get() const { return data; }
};

// Small batches (KernelSet::wide_min_m..wide_max_m) on the wide tiles: the rows are split into
// npass equal panels of at most wide_max_rows (one panel up to there), each a single register
// tile over the whole K, and each thread walks its column groups with every panel: one pass
// streams each weight block from memory, the others (M > wide_max_rows) re-read it from L2.
// With several passes, prefetch_next kernels prefetch the thread's next group during the
// current group's passes (a 1/npass slice in each), so memory streams under every pass; the
// others prefetch near ahead in each pass. Each column's sum runs in the same order under any
// split, so results do not depend on the thread count.
void gemm_wide(const GemmArgs& a, ThreadPool& pool, const detail::KernelSet& ks) {
  const int64_t kpairs = ceil_div(a.k, 2);
  const int64_t npass = ceil_div(a.m, ks.wide_max_rows);
  const int64_t mr = ceil_div(a.m, npass);
  const int64_t nblocks = ceil_div(a.n, kBlockCols);
  // Blocks per tile: the kernels' choice, fewer when that would leave threads without a group
  // (M = 1, N = 1,024 on 64 threads: 16 groups of 4 blocks, or 64 of 1). Each column's sum runs
  // in the same order whatever the tile width, so this changes no result.
  const int threads = pool.size();
  const int64_t nb =
      std::clamp<int64_t>(nblocks / (2 * threads), 1, std::max(1, ks.wide_nb(int(mr))));
  const int64_t ngroups = ceil_div(nblocks, nb);
  const auto pack_x = ks.wide_pack_x ? ks.wide_pack_x : ks.pack_x;
  const int64_t panel_bytes =
      kpairs * mr * int64_t(ks.wide_pack_x ? ks.wide_pair_bytes : ks.pair_bytes);
  const int64_t block_stride = kpairs * kBlockPairBytes;
  const uint8_t* w = static_cast<const uint8_t*>(a.packed_w);
  // Bytes of group g's weights (its blocks are consecutive).
  auto group_bytes = [&](int64_t g) { return std::min(nb, nblocks - g * nb) * block_stride; };
  // One pass (M <= wide_max_rows) streams its nb weight blocks with the near-ahead prefetch
  // (measured on a Zen 3: 90% of the read bandwidth at M = 1 against 80% with the next group
  // prefetched), non-temporal up to one_pass_nta_max_rows rows; several passes prefetch the
  // next group spread over them (M = 8: 80% of the FMA peak against 70-76% with the near-ahead
  // prefetch in the first pass only).
  const bool spread = (ks.prefetch_next || ks.wide_prefetch_next) && npass > 1;

  // Pass p takes rows [row0(p), row0(p + 1)): as even as they go (M = 16: 5 + 5 + 6 rather
  // than 6 + 6 + 4, whose 4-row tile has just enough accumulator chains for the FMA latency).
  auto row0 = [&](int64_t p) { return p * a.m / npass; };
  PackedX xp(a.scratch, size_t(npass * panel_bytes));
  for (int64_t p = 0; p < npass; ++p) {
    pack_x(static_cast<uint8_t*>(xp.get()) + p * panel_bytes, a.x + row0(p) * a.ldx, a.ldx,
           row0(p + 1) - row0(p), a.k, mr, 0, 1);
  }

  auto work = [&](int64_t g0, int64_t g1) {
    detail::Tile t{};
    t.xs = mr;
    t.w_block_stride = block_stride;
    t.ldo = a.ldo;
    t.kpairs = kpairs;
    t.first = true;
    t.prefetch_nta = npass == 1 && a.m <= ks.one_pass_nta_max_rows;
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t col0 = g * nb * kBlockCols;
      t.ncols = int(std::min<int64_t>(nb * kBlockCols, a.n - col0));
      t.bias = a.bias ? a.bias + col0 : nullptr;
      t.w = w + g * nb * block_stride;
      const int64_t next_bytes = spread && g + 1 < g1 ? group_bytes(g + 1) : 0;
      for (int64_t p = 0; p < npass; ++p) {
        t.x = static_cast<const uint8_t*>(xp.get()) + p * panel_bytes;
        t.rows = int(row0(p + 1) - row0(p));
        t.out = a.out + row0(p) * a.ldo + col0;
        t.prefetch = !spread || (g == g0 && p == 0);
        t.pf_next = nullptr;
        if (next_bytes) {
          const int64_t b0 = next_bytes * p / npass / 64 * 64;
          const int64_t b1 = p + 1 == npass ? next_bytes : next_bytes * (p + 1) / npass / 64 * 64;
          t.pf_next = t.w + nb * block_stride + b0;
          t.pf_bytes = b1 - b0;
        }
        ks.tile_wide(t);
      }
    }
  };
  // Each thread walks a contiguous share of the groups, then takes chunks from the end of the
  // others' (run_ranges): its weights are one stream. With the chunks handed out in turn instead
  // (run_chunks), each thread's stream broke every few groups and its near-ahead prefetch ran
  // into the other thread's next chunk. A decode step's GEMMs (Qwen3-0.6B, 28 layers and the
  // lm_head, weights from memory, x written by both threads before each call as the engine
  // leaves it), on an Intel Xeon (family 6 model 207, 2 threads, alternated in one process): M
  // = 16 68.3-70.3 against 75.6-76.7 ms a step (medians of 6-10); M = 8 and 32 6% and 5%
  // faster, M = 1 1.6%. Two independent 1-thread streams over the same weights had shown the
  // gap: 302.7 GFLOP/s together against 280.4 for one 2-thread stream, and 2 x 151.7 alone.
  run_ranges(pool, ngroups, std::clamp<int64_t>(ngroups / (threads * 8), 1, 8),
             [&](int64_t g0, int64_t g1) { work(g0, g1); });
}

}  // namespace

void* GemmScratch::reserve(size_t bytes) {
  if (bytes > bytes_) {
    const size_t grown = std::max(bytes, bytes_ * 2);
    ::operator delete(data_, std::align_val_t(64));
    data_ = nullptr;
    bytes_ = 0;
    data_ = ::operator new(grown, std::align_val_t(64));
    bytes_ = grown;
  }
  return data_;
}

GemmScratch::~GemmScratch() { ::operator delete(data_, std::align_val_t(64)); }

namespace detail {

const KernelSet& kernels_of(GemmIsa isa) {
  return isa == GemmIsa::AMX_BF16      ? amx_bf16_kernels()
         : isa == GemmIsa::AVX512_BF16 ? avx512_bf16_kernels()
         : isa == GemmIsa::AVX512_FMA  ? avx512_fma_kernels()
                                       : avx2_kernels();
}

}  // namespace detail

GemmIsa select_gemm_isa(CpuIsa want) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
      !__builtin_cpu_supports("f16c"))
    fail("the CPU backend needs AVX2, FMA and F16C, which this CPU lacks");
  if (want == CpuIsa::AVX512 && !cpu_has_avx512())
    fail("NANOVLLM_CPU_ISA=avx512: this CPU lacks AVX-512 F/BW/VL/DQ (use avx2 or auto)");
  if (want == CpuIsa::AMX && !cpu_has_amx_bf16())
    fail(
        "NANOVLLM_CPU_ISA=amx: this CPU (or its OS) does not let this process use AMX BF16 "
        "tiles (use avx512, avx2 or auto)");
  if (!avx512_allowed(want) || !cpu_has_avx512()) return GemmIsa::AVX2;
  if (want != CpuIsa::AVX512 && cpu_has_amx_bf16()) return GemmIsa::AMX_BF16;
  if (!cpu_has_avx512_bf16()) return GemmIsa::AVX512_FMA;
  // Measured once per process: the choice is the core's, and the same for every backend.
  static const bool dot = bf16_dot_outruns_fma512();
  return dot ? GemmIsa::AVX512_BF16 : GemmIsa::AVX512_FMA;
}

GemmIsa detect_gemm_isa() { return select_gemm_isa(cpu_isa_from_env()); }

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::AMX_BF16:
      return "amx_bf16";
    case GemmIsa::AVX512_BF16:
      return "avx512_bf16";
    case GemmIsa::AVX512_FMA:
      return "avx512_fma";
    case GemmIsa::AVX2:
      return "avx2_fma";
  }
  return "?";
}

size_t packed_weight_bytes(int64_t n, int64_t k) {
  NV_CHECK(n >= 1 && k >= 1, "weight shape [{}, {}]", n, k);
  return size_t(ceil_div(n, kBlockCols) * ceil_div(k, 2) * kBlockPairBytes);
}

int64_t packed_weight_blocks(int64_t n) { return ceil_div(n, kBlockCols); }

void pack_weight(void* dst, const uint16_t* w, int64_t n, int64_t k) {
  pack_weight_blocks(dst, w, n, k, 0, packed_weight_blocks(n));
}

void pack_weight_blocks(void* dst, const uint16_t* w, int64_t n, int64_t k, int64_t b0,
                        int64_t b1) {
  NV_CHECK((reinterpret_cast<uintptr_t>(dst) & 63) == 0, "packed weight must be 64-byte aligned");
  NV_CHECK(b0 >= 0 && b0 <= b1 && b1 <= packed_weight_blocks(n), "blocks [{}, {}) of {}", b0, b1,
           packed_weight_blocks(n));
  const int64_t kpairs = ceil_div(k, 2);
  uint16_t* out = static_cast<uint16_t*>(dst);
  for (int64_t b = b0; b < b1; ++b) {
    uint16_t* blk = out + b * kpairs * 32;  // [kpairs][16][2]
    const int64_t cols = std::min<int64_t>(kBlockCols, n - b * kBlockCols);
    if (cols == kBlockCols && k % 2 == 0) {  // whole pairs of 16 rows: written in order
      const uint16_t* rows = w + b * kBlockCols * k;
      for (int64_t p = 0; p < kpairs; ++p)
        for (int64_t c = 0; c < kBlockCols; ++c)
          std::memcpy(blk + (p * kBlockCols + c) * 2, rows + c * k + 2 * p, 4);
      continue;
    }
    std::memset(blk, 0, size_t(kpairs * kBlockPairBytes));  // missing rows and odd k's last half
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t* row = w + (b * kBlockCols + c) * k;
      for (int64_t i = 0; i < k; ++i) blk[(i / 2) * 32 + c * 2 + (i & 1)] = row[i];
    }
  }
}

void unpack_weight_row(float* out, const void* packed, int64_t n, int64_t k, int64_t row) {
  NV_CHECK(row >= 0 && row < n, "row {} of a [{}, {}] weight", row, n, k);
  const int64_t kpairs = ceil_div(k, 2);
  const uint16_t* blk = static_cast<const uint16_t*>(packed) + (row / kBlockCols) * kpairs * 32 +
                        (row % kBlockCols) * 2;
  for (int64_t i = 0; i < k; ++i) out[i] = bf16_to_f32(blk[(i / 2) * 32 + (i & 1)]);
}

void gemm(const GemmArgs& a, ThreadPool& pool, GemmIsa isa) {
  NV_CHECK(a.m >= 0 && a.n >= 1 && a.k >= 1, "gemm shape m={} n={} k={}", a.m, a.n, a.k);
  NV_CHECK(a.ldx >= a.k && a.ldo >= a.n, "gemm strides ldx={} (k={}) ldo={} (n={})", a.ldx, a.k,
           a.ldo, a.n);
  NV_CHECK((reinterpret_cast<uintptr_t>(a.packed_w) & 63) == 0,
           "packed weight must be 64-byte aligned (the kernels use aligned loads)");
  if (a.m == 0) return;
  const detail::KernelSet& ks = detail::kernels_of(isa);
  if (ks.tile_wide && a.m >= ks.wide_min_m && a.m <= ks.wide_max_m) {
    gemm_wide(a, pool, ks);
    return;
  }
  const int64_t kpairs = ceil_div(a.k, 2);
  // Panel height: mr, or equal panels where the kernels ask (balance_panels); a batch below mr
  // (decode of a few sequences) packs just its rows, not mr - M rows of zeros each call (a
  // 6-row panel for M = 1 spent about 1 ms a decode step on Qwen3-0.6B, serially, Zen 4). The
  // tiles read any panel height, so the results are the same bits. The AMX panels keep
  // their layout's height.
  const bool exact = ks.balance_panels || (a.m < ks.mr && ks.kpair_align == 1);
  const int64_t mr = exact ? ceil_div(a.m, ceil_div(a.m, ks.mr)) : ks.mr;
  const int64_t npanels = ceil_div(a.m, mr);
  const int64_t nblocks = ceil_div(a.n, kBlockCols);
  const int threads = pool.size();
  // Blocks per column group: the kernels' width, narrower for a single x panel when that would
  // leave threads without a group (several panels split in two dimensions instead, below).
  // Column sums do not depend on the width.
  const int64_t gnb = npanels == 1 ? std::clamp<int64_t>(nblocks / (2 * threads), 1,
                                                         ks.one_panel_nb ? ks.one_panel_nb : ks.nb)
                                   : int64_t(ks.nb);
  const int64_t ngroups = ceil_div(nblocks, gnb);
  const int64_t panel_bytes =
      ceil_div(kpairs, ks.kpair_align) * ks.kpair_align * mr * int64_t(ks.pair_bytes);
  const int64_t block_stride = kpairs * kBlockPairBytes;

  // 1. x -> packed bf16 panels, once per call ([npanels][kpairs][mr] pairs).
  PackedX xp(a.scratch, size_t(npanels * panel_bytes));
  if (a.m * a.k < 16384 || npanels < 2) {
    ks.pack_x(xp.get(), a.x, a.ldx, a.m, a.k, mr, 0, npanels);
  } else {
    run_chunks(
        pool, npanels, std::max<int64_t>(1, npanels / (threads * 4)),
        [&](int64_t p0, int64_t p1) { ks.pack_x(xp.get(), a.x, a.ldx, a.m, a.k, mr, p0, p1); });
  }

  // 2. Tiles. Loop nest per thread: M block (x slab) > column group (nb blocks, one register
  // tile wide) > k block (weight panel in L1) > x panel. The first panel of each (group,
  // k block) pulls the weights from memory and prefetches near ahead; prefetch_next kernels
  // instead prefetch the next weight panel spread over the panels of the current one (with
  // nb = 1 it follows the current one in memory; a 2-block panel, prefetch_next_pairs, is two
  // streams a block_stride apart), the near-ahead prefetch only where nothing was prefetched.
  // One x panel (decode): each weight is used once, so no k blocking.
  const int64_t kc = npanels == 1 || ks.whole_k ? kpairs : kKcPairs;
  const bool spread = ks.prefetch_next && (gnb == 1 || (gnb == 2 && ks.prefetch_next_pairs));
  // x panels per M block: the kernels' count, fewer where that slab would pass half the L2. A
  // column group walks all its k blocks over the slab before the next group comes back to it,
  // so the whole slab (its rows over the whole K), not one k block of it, is what stays in L2:
  // 128 six-row panels at K = 3,072 were 4.5 MiB, streamed again from L3 for every group. On a
  // Zen 4 (1 MiB L2, 2 threads) with the contiguous split below: M = 512 and 4,096 of the
  // Qwen3-0.6B shapes at 400-409 GFLOP/s (85-88% of the vdpbf16ps peak; within 3% of a slab
  // of 128 panels, 256 KiB or 1 MiB).
  const int64_t mc_panels =
      std::clamp<int64_t>(cpu_l2_bytes() / 2 / panel_bytes, 1, std::max<int64_t>(1, ks.mc_panels));
  const bool widen =
      ks.widen_panel && kc == kKcPairs && std::min(npanels, mc_panels) >= kWidenMinPanels;
  auto work = [&](int64_t g0, int64_t g1, int64_t p0, int64_t p1) {
    // This thread's widened weight panel ([gnb][kc][32] f32).
    AlignedPtr widened =
        widen ? aligned_alloc64(size_t(gnb * kc * 2 * kBlockPairBytes)) : AlignedPtr();
    detail::Tile t{};
    t.xs = mr;
    t.w_block_stride = block_stride;
    t.ldo = a.ldo;
    for (int64_t pb = p0; pb < p1; pb += mc_panels) {
      const int64_t pe = std::min(p1, pb + mc_panels);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t col0 = g * gnb * kBlockCols;
        t.ncols = int(std::min<int64_t>(gnb * kBlockCols, a.n - col0));
        t.bias = a.bias ? a.bias + col0 : nullptr;
        for (int64_t kp0 = 0; kp0 < kpairs; kp0 += kc) {
          t.kpairs = std::min(kc, kpairs - kp0);
          t.first = kp0 == 0;
          t.w = static_cast<const uint8_t*>(a.packed_w) + g * gnb * block_stride +
                kp0 * kBlockPairBytes;
          // The next weight panel of this thread: (g, next k block) or (g + 1, 0), from next_w
          // in each of its blocks (two streams when it has a second block).
          int64_t next_bytes = 0;
          const uint8_t* next_w = nullptr;
          bool next_two = false;
          if (spread) {
            if (kp0 + kc < kpairs) {
              next_bytes = std::min(kc, kpairs - kp0 - kc) * kBlockPairBytes;
              next_w = t.w + t.kpairs * kBlockPairBytes;
              next_two = gnb == 2 && t.ncols > kBlockCols;
            } else if (g + 1 < g1) {
              next_bytes = std::min(kc, kpairs) * kBlockPairBytes;
              next_w = static_cast<const uint8_t*>(a.packed_w) + (g + 1) * gnb * block_stride;
              next_two = gnb == 2 && ((g + 1) * gnb + 1) * kBlockCols < a.n;
            }
          }
          const bool fresh = !spread || (g == g0 && kp0 == 0);
          const bool widen_now = widen && pe - pb >= kWidenMinPanels;
          if (widen_now) {
            // This panel's tiles read the widened copy: t's weight fields are switched for the
            // panel loop (the stride put back after it; the next k block sets w again), not
            // copied into another Tile (that copy, wide loads of fields just stored narrow, took
            // 5-6% of an M = 2,048 GEMM's samples on the Intel VM).
            ks.widen_panel(static_cast<float*>(widened.get()), t.w, block_stride,
                           int(ceil_div(t.ncols, kBlockCols)), t.kpairs);
            t.w = static_cast<const uint8_t*>(widened.get());
            t.w_block_stride = t.kpairs * 2 * kBlockPairBytes;
          }
          for (int64_t p = pb; p < pe; ++p) {
            t.x = static_cast<const uint8_t*>(xp.get()) + p * panel_bytes +
                  kp0 * mr * int64_t(ks.pair_bytes);
            t.rows = int(std::min(mr, a.m - p * mr));
            t.out = a.out + p * mr * a.ldo + col0;
            t.prefetch =
                !widen_now && p == pb && fresh && (npanels > 1 || ks.one_panel_prefetch);
            t.pf_next = nullptr;
            if (next_bytes) {
              const int64_t np = pe - pb, i = p - pb;
              const int64_t b0 = next_bytes * i / np / 64 * 64;
              const int64_t b1 = i + 1 == np ? next_bytes : next_bytes * (i + 1) / np / 64 * 64;
              t.pf_next = next_w + b0;
              t.pf_bytes = b1 - b0;
              t.pf_stride = next_two ? block_stride : 0;
            }
            if (widen_now) {
              ks.tile_widened(t);
            } else {
              ks.tile(t);
            }
          }
          t.w_block_stride = block_stride;
        }
      }
    }
  };

  // Units of work: column groups alone where there are enough to balance (each thread streams
  // its own weights); otherwise (group, x panel range) pairs, the panels cut into as many ranges
  // as it takes for about 8 units a thread, so that every thread has work at any count (a
  // group's weights are then read by several threads). Each output tile is computed the same
  // way under any split, so the split changes no result.
  // Several x panels (prefill): each thread one contiguous range of groups (a range is taken
  // again by a thread that finishes first), so that each thread's weights are one stream. On a
  // Zen 4 (2 threads) the Qwen3-0.6B shapes ran at 395-409 GFLOP/s this way against 350-375
  // with groups handed out a few at a time (M = 512 and 4,096; the AVX2 tiles at M = 4,096:
  // 200-210 against 177-179). Not the AMX tiles (whole_k): their M blocks are 4 panels of 32
  // rows, so a range would re-read its weights every 128 rows, where a group handed out alone
  // keeps its weights in L2 over all of M (the AMX split stays as measured on its Xeon; the
  // contiguous one is unmeasured there).
  const int64_t want = 8 * int64_t(threads);
  if (ngroups >= want / 2 || npanels == 1) {
    // One x panel: chunks of a few groups, each thread's from a contiguous share first
    // (run_ranges, as gemm_wide). Several: one range a thread, whose loop keeps each x slab in
    // L2 over all of its groups.
    const int64_t chunk = npanels == 1 || ks.whole_k ? std::clamp<int64_t>(ngroups / want, 1, 8)
                                                     : ceil_div(ngroups, threads);
    auto fn = [&](int64_t g0, int64_t g1) { work(g0, g1, 0, npanels); };
    if (npanels == 1 && !ks.whole_k)
      run_ranges(pool, ngroups, chunk, fn);
    else
      run_chunks(pool, ngroups, chunk, fn);
    return;
  }
  const int64_t pstep = ceil_div(npanels, std::min(npanels, ceil_div(want, ngroups)));
  const int64_t nranges = ceil_div(npanels, pstep);
  // Unit u: panel range u / ngroups, group u % ngroups (a thread's consecutive units share the
  // x slab of one range).
  run_chunks(pool, ngroups * nranges, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t r = u / ngroups, g = u % ngroups;
      work(g, g + 1, r * pstep, std::min(npanels, (r + 1) * pstep));
    }
  });
}

}  // namespace nanovllm::cpu
