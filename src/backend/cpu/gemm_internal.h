#pragma once
// Internals shared by the GEMM driver (gemm.cpp) and its ISA kernels (gemm_avx512.cpp,
// gemm_avx2.cpp). Not part of the backend interface.
//
// Packed weight layout (both ISAs): w[n, k] bf16 becomes [ceil(n/16)][ceil(k/2)][16][2]: for
// each block of 16 output columns, one 64-byte row per pair of k, holding (w[j, 2p], w[j, 2p+1])
// for the 16 columns j. Padding (n up to a multiple of 16, k up to even) is zero.
//
// Packed x layout: panels of `mr` rows, each [ceil(k/2)][mr] pairs; a pair is a bf16 pair
// (4 bytes) for AVX-512 BF16, or two bf16-rounded f32 (8 bytes) for AVX2. Rows past m and the
// odd k padding are zero. The AMX kernels' panels are [ceil(k/32)][mr][16] bf16 pairs instead
// (gemm_amx.cpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cpu/gemm.h"

namespace nanovllm::cpu::detail {

constexpr int64_t kBlockCols = 16;       // output columns per packed weight block
// Summation order, the same on every path of an ISA (so a row's result does not depend on M,
// the tile shape or the cache blocking: batch invariance). K is summed in chunks of
// kSumChunkPairs pairs from pair 0: each chunk's multiply-add chain starts at zero, and
// out = ((chunk_0 + bias) + chunk_1) + ...  Tiles start at multiples of kSumChunkPairs.
constexpr int64_t kSumChunkPairs = 128;
constexpr int64_t kBlockPairBytes = 64;  // bytes of one k-pair row of a block (16 x 2 bf16)
// How far ahead in each stream a kernel that reads its weights once prefetches them with
// prefetchnta (Tile::prefetch_nta), and the read probe's non-temporal patterns (roofline.cpp).
// AMD's optimization guide for its K8 cores says a line prefetchnta brings from memory goes to
// the L1 and is not written back into the L2 when it leaves, where a line a plain load or
// prefetcht0 brings is (on the Zen cores the L2's evictions also fill the L3); the AMD64 manual
// leaves the technique implementation-dependent, so the gain is what was measured. On a
// first-generation Zen (AMD EPYC family 23 model 1, 2 threads, a decode step's 113 GEMVs of
// Qwen3-0.6B shapes, 1.19 GB, 30 interleaved rounds, median time against prefetcht0 1 KiB ahead
// in each of 4 streams): prefetchnta 256 / 384 / 512 / 768 B ahead 0.90 / 0.89 / 0.90 / 0.91,
// 1 KiB 0.93, none 0.94; a plain read of the same bytes 0.90, one with prefetchnta 512 B ahead
// 0.84.
constexpr int64_t kStreamOnceAheadBytes = 512;

// One register tile: out[rows, ncols] (+)= xpanel[rows, kpairs] @ wblocks[kpairs, ncols].
struct Tile {
  const void* x;           // packed x panel, at the first pair of this k range: [kpairs][xs]
  int64_t xs;              // pairs per k-pair row of the panel (the panel's mr)
  const uint8_t* w;        // packed weight, block of column 0, at the first pair of the range
  int64_t w_block_stride;  // bytes between consecutive 16-column blocks
  int64_t kpairs;
  float* out;  // [rows, ncols] at stride ldo
  int64_t ldo;
  const uint16_t* bias;  // bf16 [ncols] or nullptr; added only when `first`
  int rows;              // 1..mr
  int ncols;             // 1..nb*16
  bool first;            // out = acc + bias; otherwise out += acc
  bool prefetch;         // software-prefetch the weight streams (they come from memory)
  // With `prefetch`: this tile is the weights' only reader (a one-pass tile), so the prefetch is
  // non-temporal, kStreamOnceAheadBytes ahead in each stream (KernelSet::one_pass_nta_max_rows).
  bool prefetch_nta = false;
  // The next tile's weights (KernelSet::prefetch_next kernels): pf_bytes from pf_next, which
  // the tile prefetches spread evenly over its k loop. nullptr: none.
  const uint8_t* pf_next = nullptr;
  int64_t pf_bytes = 0;
  // Non-zero: the next tile's weights are two streams (a 2-block panel), the second pf_stride
  // bytes after the first; each line prefetched from pf_next is prefetched there too
  // (KernelSet::prefetch_next_pairs kernels).
  int64_t pf_stride = 0;
};

struct KernelSet {
  int mr;             // rows per x panel (register tile height)
  int nb;             // 16-column blocks per register tile
  size_t pair_bytes;  // bytes of one packed x pair
  // Packs x rows [panel_begin*mr, ...) for panels [panel_begin, panel_end) into dst (the
  // whole packed buffer).
  void (*pack_x)(void* dst, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mr,
                 int64_t panel_begin, int64_t panel_end);
  void (*tile)(const Tile& t);
  // Optional (nullptr: not available) "wide" tiles for small batches: up to wide_max_rows rows
  // in one register tile, so each weight row streamed from memory is applied to every x row
  // while it is in registers (M = 7..32: the weight stream overlaps the multiply-adds instead
  // of alternating with re-reads from L1). wide_nb(rows) is the number of 16-column blocks per
  // tile for a panel of `rows` rows; tile_wide takes any rows <= wide_max_rows and ncols <=
  // wide_nb(rows) * 16.
  int wide_max_rows;
  int (*wide_nb)(int rows);
  void (*tile_wide)(const Tile& t);
  int64_t wide_min_m;   // batches M in [wide_min_m, wide_max_m] take the wide tiles
  int64_t wide_max_m;
  int64_t mc_panels;  // x panels per M block of the blocked path at most (the x slab kept in
                      // L2; the driver takes fewer where they would pass half the L2)
  // Panels of equal height (ceil(M / ceil(M / mr)) rows) instead of full mr-row panels and a
  // short last one: kernels whose short tiles are latency-bound.
  bool balance_panels;
  // The driver hands each tile the next tile's weights (Tile::pf_next) and asks the near-ahead
  // prefetch (Tile::prefetch) only of tiles whose weights nobody prefetched.
  bool prefetch_next;
  // The same for the wide tiles' passes alone (gemm_wide with several passes), where
  // prefetch_next is false.
  bool wide_prefetch_next = false;
  // With prefetch_next: the blocked path's 2-block panels (nb = 2) prefetch the next panel too,
  // its two blocks' streams through Tile::pf_stride (otherwise only 1-block panels do).
  bool prefetch_next_pairs = false;
  // The packed x panels hold k pairs rounded up to a multiple of this (the AMX kernels' layout
  // steps 16 pairs at a time).
  int64_t kpair_align = 1;
  // The tiles keep their sums over the whole k (no k blocks in the blocked path: the AMX tiles,
  // whose partial sums would otherwise go through memory with every k block).
  bool whole_k = false;
  // Blocks per tile when M fits one x panel (0: nb).
  int one_panel_nb = 0;
  // When M fits one x panel (decode), the tiles' near-ahead software prefetch of the weight
  // streams (Tile::prefetch); false: the hardware prefetchers alone.
  bool one_panel_prefetch = true;
  // One-pass wide tiles (each weight read once) of up to this many rows prefetch
  // non-temporally (Tile::prefetch_nta); 0: none.
  int64_t one_pass_nta_max_rows = 0;
  // The wide tiles' own x packing (nullptr: pack_x, pair_bytes), panels of [kpairs][mr] pairs.
  void (*wide_pack_x)(void* dst, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mr,
                      int64_t panel_begin, int64_t panel_end) = nullptr;
  size_t wide_pair_bytes = 0;
  // Optional (nullptr: none): the blocked path's tiles over weights widened to f32 once per M
  // block, not once per tile. widen_panel writes nb blocks x kpairs pairs of the packed weights
  // (block_stride bytes apart) to dst as f32, [nb][kpairs][32]: each pair's 16 even k, then its
  // 16 odd k (exact); tile_widened runs the blocked tiles (up to mr rows x nb blocks) over such a
  // copy (Tile::w at its first pair, w_block_stride = kpairs * 128 bytes) with the same
  // multiply-adds in the same order: the same bits, without the tiles' widening instructions.
  void (*widen_panel)(float* dst, const uint8_t* w, int64_t block_stride, int nb,
                      int64_t kpairs) = nullptr;
  void (*tile_widened)(const Tile& t) = nullptr;
};

using TileFn = void (*)(const Tile&);

// A kernel set's register tiles for 1..MaxRows rows x 1..MaxNb 16-column blocks, in run_tile's
// order: entry(std::integral_constant<int, R>, std::integral_constant<int, NB>) returns the tile
// of R rows and NB blocks, or nullptr where it does not fit the registers (the driver asks only
// for what the set's wide_nb allows).
template <int MaxRows, int MaxNb, class Entry>
constexpr std::array<TileFn, size_t(MaxRows* MaxNb)> tile_table(Entry entry) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array<TileFn, sizeof...(I)>{
        entry(std::integral_constant<int, int(I / MaxNb) + 1>(),
              std::integral_constant<int, int(I % MaxNb) + 1>())...};
  }
  (std::make_index_sequence<size_t(MaxRows * MaxNb)>());
}

// Runs the table's tile for t.rows rows and t.ncols columns.
template <int MaxNb, size_t N>
inline void run_tile(const std::array<TileFn, N>& table, const Tile& t) {
  table[size_t((t.rows - 1) * MaxNb + (t.ncols + 15) / 16 - 1)](t);
}

// The kernel set gemm() runs for `isa`.
const KernelSet& kernels_of(GemmIsa isa);

const KernelSet& avx512_bf16_kernels();
const KernelSet& avx512_fma_kernels();
const KernelSet& avx2_kernels();
const KernelSet& amx_bf16_kernels();
// Fills s.wide_* (but the M range) with gemm_amx_rows.cpp's tiles: the AMX tiles' bits for a few
// rows, on AVX-512 FMAs.
void set_amx_bf16_rows_tiles(KernelSet& s);
// A loop of tdpbf16ps on four independent tiles, 4 x 16 x 16 x 32 multiply-adds an iteration
// (the AMX ceiling of roofline.h); needs cpu_has_amx_bf16().
float amx_bf16_peak_loop(int64_t iters);
// 2 tdpbssd + 2 tdpbusd on four independent 16 x 16 int32 tiles an iteration (the AMX INT8
// tiles' ceiling); needs cpu_has_amx_int8().
void amx_int8_peak_loop(int64_t iters);

}  // namespace nanovllm::cpu::detail
