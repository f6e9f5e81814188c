// AVX-512 F GEMM kernels that widen bf16 weights to f32 and multiply-add with vfmadd231ps zmm:
// the AVX2 kernels (gemm_avx2.cpp) at twice the width, on the same packed weights and the same
// packed x (bf16-rounded f32 pairs). Each 64-byte k-pair row of a 16-column block is one zmm:
// the even k by a shift (the low halves << 16), the odd k by a mask, each meeting every row of
// the tile. Per lane the operations and their order are the AVX2 kernels', so both give the
// same bits. The blocked path's tiles may read a copy of their weight panel widened once per M
// block instead (widen_panel, tile_widened; gemm.cpp, kWidenMinPanels).
//
// Why: on CPUs whose vdpbf16ps runs at a fraction of the FMA rate this is the faster bf16 GEMM.
// Measured on an Intel Xeon (family 6 model 207, AVX-512 BF16, 2 cores of a VM): vdpbf16ps zmm
// 0.48 a cycle (15 multiply-adds a cycle) against 2 vfmadd231ps zmm a cycle (32); a 12-row tile
// spends 4 widening instructions per 48 FMAs. On Zen 4 the reverse holds (vdpbf16ps zmm at the
// rate of its FMA), so select_gemm_isa measures both and takes the faster.
#include <immintrin.h>

#include <array>
#include <utility>

#include "backend/cpu/gemm_internal.h"

namespace nanovllm::cpu::detail {
namespace {

constexpr int kMr = 12;          // rows per register tile of the blocked path
constexpr int kNb = 2;           // blocks per register tile: 24 accumulators
constexpr int kMaxRows = 24;     // wide tiles: up to 24 rows x 1 block
constexpr int kMaxAcc = 24;      // accumulators of a tile (the rest of the 32 zmm: weights, x)
constexpr int kMaxNb = 4;        // blocks per tile (1-row tiles)
// Near-ahead prefetch distance over all of a tile's weight streams, as in the AVX2 kernels.
constexpr int kPrefetchBytes = 4096;
constexpr int kMcPanels = 16;    // 16 x 12 rows x 128 k pairs x 8 bytes = 192 KiB of x in L2
// Tiles of at least kXPrefetchRows rows prefetch their x panel kXPrefetchPairs pairs ahead: the
// panel comes from L2 (a blocked tile's 12 KiB k block, one of the slab's; a wide tile's whole
// K, 64-192 KiB at 16 rows), 24-48 broadcasts a pair from 1.5-3 lines, and the L1's own
// prefetcher did not keep up. Measured on an Intel Xeon (family 6 model 207, 2 threads), with
// and without alternating in one process: M = 2,048 GEMMs of Qwen3-0.6B +4-8% (o_proj 242 ->
// 262 GFLOP/s, down_proj 233 -> 254, medians of 12; 12 to 32 pairs ahead alike, 2 less), M =
// 16 o_proj and down_proj +5-6% (K = 1,024: even); `nanovllm bench` 16 x (128 + 128), three
// alternated rounds: decode 12.58-13.21 -> 11.84-12.57 s, 193-202 -> 199-209 total tok/s. The AVX2
// kernels' tiles (6 rows, 48 bytes a pair at half the rate) lost 1-4% with it there: not them.
constexpr int kXPrefetchRows = 8;
constexpr int kXPrefetchPairs = 16;

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

// A 64-byte pair row of a block as f32: its 16 even k (the low halves << 16) and its 16 odd k
// (the high halves). The tiles and widen_panel's copy both widen through this.
inline void widen_pairs(__m512i wv, __m512& even, __m512& odd) {
  even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wv, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(wv, _mm512_set1_epi32(int(0xffff0000u))));
}

// Row r, block b of the tile's output: out = (bias or 0) + acc when first, else out + acc.
inline void store(const Tile& t, int r, int b, bool first, __m512 acc) {
  float* o = t.out + r * t.ldo + 16 * b;
  const int cols = t.ncols - 16 * b < 16 ? t.ncols - 16 * b : 16;
  const __mmask16 m = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  __m512 base;
  if (!first) {
    base = _mm512_maskz_loadu_ps(m, o);
  } else if (t.bias) {
    const __m256i b16 = _mm256_maskz_loadu_epi16(m, t.bias + 16 * b);
    base = _mm512_castsi512_ps(
        _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, b16), 16));
  } else {
    base = _mm512_setzero_ps();
  }
  _mm512_mask_storeu_ps(o, m, _mm512_add_ps(base, acc));
}

// out[R rows, NB blocks] (+)= x panel @ weight blocks, over t.kpairs pairs in summation chunks.
// Widened: the blocks are widen_panel's f32 copy (128 bytes a pair), loaded as they are.
template <int R, int NB, bool Widened = false>
void tile_kernel(const Tile& t) {
  const uint8_t* w = t.w;
  const int64_t ws = t.w_block_stride;
  const float* x = static_cast<const float*>(t.x);
  const int64_t xs2 = t.xs * 2;
  // The next tile's weights: pf_lines lines spread over t.kpairs pairs.
  const char* pf = reinterpret_cast<const char*>(t.pf_next);
  const int64_t pf_lines = t.pf_next ? (t.pf_bytes + 63) / 64 : 0;
  const int64_t pf_stride = t.pf_stride;  // the second stream's offset (2-block panels), or 0
  int64_t credit = 0;
  const int64_t kpairs = t.kpairs;
  const bool prefetch = t.prefetch;
  for (int64_t c0 = 0; c0 < t.kpairs; c0 += kSumChunkPairs) {
    const int64_t c1 = t.kpairs - c0 < kSumChunkPairs ? t.kpairs : c0 + kSumChunkPairs;
    const bool first = t.first && c0 == 0;
    __m512 acc[R][NB];
#pragma GCC unroll 24
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
    for (int64_t p = c0; p < c1; ++p) {
      if (prefetch)
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(w + b * ws + kPrefetchBytes / NB),
                       _MM_HINT_T0);
      if constexpr (R >= kXPrefetchRows)
        for (int64_t f = 0; f < xs2; f += 16)  // the pair's lines, kXPrefetchPairs ahead
          _mm_prefetch(reinterpret_cast<const char*>(x + kXPrefetchPairs * xs2 + f), _MM_HINT_T0);
      for (credit += pf_lines; credit >= kpairs; credit -= kpairs, pf += 64) {
        _mm_prefetch(pf, _MM_HINT_T0);
        if (pf_stride) _mm_prefetch(pf + pf_stride, _MM_HINT_T0);
      }
      // The widened weights of every block first, then each x broadcast meets them all: a
      // broadcast lives for NB FMAs only (GCC keeps the 24 accumulators in registers so).
      __m512 even[NB], odd[NB];
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        if constexpr (Widened) {
          even[b] = _mm512_load_ps(reinterpret_cast<const float*>(w + b * ws));
          odd[b] = _mm512_load_ps(reinterpret_cast<const float*>(w + b * ws + 64));
        } else {
          widen_pairs(_mm512_load_si512(reinterpret_cast<const void*>(w + b * ws)), even[b],
                      odd[b]);
        }
      }
#pragma GCC unroll 24
      for (int r = 0; r < R; ++r) {
        const __m512 xe = _mm512_set1_ps(x[2 * r]);
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_fmadd_ps(even[b], xe, acc[r][b]);
      }
#pragma GCC unroll 24
      for (int r = 0; r < R; ++r) {
        const __m512 xo = _mm512_set1_ps(x[2 * r + 1]);
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_fmadd_ps(odd[b], xo, acc[r][b]);
      }
      w += Widened ? 2 * kBlockPairBytes : kBlockPairBytes;
      x += xs2;
    }
#pragma GCC unroll 24
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) store(t, r, b, first, acc[r][b]);
  }
}

// Blocks per tile for `rows` rows: as many as fit the registers (rows x nb accumulators, at most
// kMaxAcc, plus 2 widened weights a block and 2 more), 1 to kMaxNb.
constexpr int wide_nb_of(int rows) {
  int nb = kMaxNb;
  while (nb > 1 && (rows * nb > kMaxAcc || rows * nb + 2 * nb + 2 > 32)) --nb;
  return nb;
}
int wide_nb(int rows) { return wide_nb_of(rows < 1 ? 1 : rows); }

constexpr auto kTable = tile_table<kMaxRows, kMaxNb>([](auto r, auto nb) -> TileFn {
  constexpr int R = decltype(r)::value, NB = decltype(nb)::value;
  if constexpr (NB <= wide_nb_of(R))
    return tile_kernel<R, NB>;
  else
    return nullptr;
});

void tile(const Tile& t) { run_tile<kMaxNb>(kTable, t); }

// The blocked path's tiles (up to kMr rows x kNb blocks) over widen_panel's copy.
constexpr auto kTableWidened = tile_table<kMr, kNb>([](auto r, auto nb) -> TileFn {
  return tile_kernel<decltype(r)::value, decltype(nb)::value, true>;
});

void tile_widened(const Tile& t) { run_tile<kNb>(kTableWidened, t); }

// KernelSet::widen_panel: each pair's 16 even k, then its 16 odd k (widen_pairs).
void widen_panel(float* dst, const uint8_t* w, int64_t block_stride, int nb, int64_t kpairs) {
  for (int b = 0; b < nb; ++b)
    for (int64_t p = 0; p < kpairs; ++p, dst += 32) {
      __m512 even, odd;
      widen_pairs(_mm512_load_si512(
                      reinterpret_cast<const void*>(w + b * block_stride + p * kBlockPairBytes)),
                  even, odd);
      _mm512_store_ps(dst, even);
      _mm512_store_ps(dst + 16, odd);
    }
}

#pragma GCC pop_options

static_assert(kMr * kNb <= kMaxAcc && wide_nb_of(kMr) >= kNb, "the blocked tile is in the table");

}  // namespace

const KernelSet& avx512_fma_kernels() {
  static const KernelSet set = [] {
    KernelSet s{};
    s.mr = kMr;
    s.nb = kNb;
    s.pair_bytes = 8;
    s.pack_x = avx2_kernels().pack_x;  // the same bf16-rounded f32 pairs
    s.tile = tile;
    s.wide_max_rows = kMaxRows;
    s.wide_nb = wide_nb;
    s.tile_wide = tile;
    s.wide_min_m = 1;
    s.wide_max_m = 48;
    s.mc_panels = kMcPanels;
    s.balance_panels = true;
    s.prefetch_next = true;
    // The blocked 12 x 2 tiles (M > 48) prefetch the next 2-block panel under the current one
    // instead of only the near-ahead prefetch in each panel's first tile. Intel Xeon (family 6
    // model 207, 2 threads, bench_gemm: weights from memory, four interleaved rounds, medians):
    // M = 64 282-300 GFLOP/s against 274-285 on the five Qwen3-0.6B shapes (each 3.5-6.5%
    // faster), M = 512 257-286 against 257-279 (1-4%).
    s.prefetch_next_pairs = true;
    s.widen_panel = widen_panel;
    s.tile_widened = tile_widened;
    return s;
  }();
  return set;
}

}  // namespace nanovllm::cpu::detail
