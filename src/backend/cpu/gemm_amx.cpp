// AMX BF16 GEMM kernels (Intel Xeon since Sapphire Rapids): tdpbf16ps on 16 x 16 f32 tiles.
// A packed weight block (gemm_internal.h: [kpairs][16][2] bf16) is already what a B tile holds:
// 16 k-pair rows of 64 bytes, so 16 pairs of a block load as one tile at stride 64. x is packed
// to bf16 in 16-pair rows ([ceil(kpairs/16)][mr][16] pairs per panel), so 16 rows of one
// 16-pair step load as one A tile. A register tile is 32 rows x 32 columns (C tiles 0-3, A tiles
// 4-5 for rows 0-15 and 16-31, B tiles 6-7 for the two 16-column blocks), or with one x panel of
// up to 16 rows (decode) 16 rows x 64 columns (C tiles 0-3, A tile 4, B tiles 5-7 in turn).
//
// Summation order: each output is one chain over the whole k, in 16-pair steps, starting from
// the bias (or zero), kept in its C tile from the first step to the last (KernelSet::whole_k),
// so a row's result depends neither on M, on its place in the tile nor on the thread split
// (batch invariance). The bits differ from the AVX-512 kernels' (the tile unit sums in its own
// order), which is why this kernel set serves every M once chosen. M = 1 and 2 run that order on
// AVX-512 FMAs (gemm_amx_rows.cpp: the same bits at the read bandwidth, where the tiles stream
// the weights at 78-84% of it).
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/isa.h"
#include "util/check.h"

namespace nanovllm::cpu::detail {
namespace {

constexpr int kMr = 32;  // rows per x panel: two A tiles
// 16-column blocks per register tile: 2 for x panels of 32 rows (four C tiles), 4 when M fits
// one panel (decode: four weight streams; more than 16 rows take them in two passes of two).
constexpr int kNb = 2;
constexpr int kOnePanelNb = 4;
constexpr int kStepPairs = 16;  // k pairs per tile step (a tile row is 64 bytes)
constexpr int64_t kStepBytes = kStepPairs * kBlockPairBytes;  // one B tile: 1 KiB
constexpr int64_t kPanelStepBytes = int64_t(kMr) * 64;        // one step of an x panel: 2 KiB

// The palette-1 configuration: 8 tiles of 16 rows x 64 bytes.
constexpr amx::TileConfig kConfig = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

inline void ensure_tiles() { amx::use(kConfig, cpu_has_amx_bf16); }

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")

// x rows -> bf16 (round to nearest even) in the [kblocks][mr][16] pair layout; rows past m and
// pairs past k are zero.
void pack_x(void* dst, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mr,
            int64_t panel_begin, int64_t panel_end) {
  const int64_t kblocks = ((k + 1) / 2 + kStepPairs - 1) / kStepPairs;
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    uint8_t* pan = out + panel * kblocks * mr * 64;
    for (int64_t r = 0; r < mr; ++r) {
      const int64_t row = panel * mr + r;
      // A panel of at most 16 rows is read by one-half tiles only (A tile 4): its rows 16-31
      // stay unwritten (decode would otherwise zero 16 rows of x per call).
      if (r >= 16 && panel * mr + 16 >= m) break;
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        __m512i v = _mm512_setzero_si512();
        if (row < m) {
          const float* src = x + row * ldx;
          const int64_t k0 = kb * 32;
          const int64_t left = k - k0;
          const __mmask16 lo = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
          const __mmask16 hi = left >= 32   ? __mmask16(0xffff)
                               : left <= 16 ? __mmask16(0)
                                            : __mmask16((1u << (left - 16)) - 1);
          v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + k0 + 16),
                                           _mm512_maskz_loadu_ps(lo, src + k0));
        }
        _mm512_store_si512(pan + (kb * mr + r) * 64, v);
      }
    }
  }
}

inline __mmask16 col_mask(int cols) {
  return cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
}

// The 16 x 16 output block (half h, block j) of the tile; rows/cols: how many are real.
struct OutBlock {
  float* p;
  int rows, cols;
  bool whole() const { return rows == 16 && cols == 16; }
};

// C tile T <- the running sum of its block: bias (or zero) on the first k block, else the
// stored partial sums (the Tile contract; with whole_k the driver passes every k at once, so
// always the first). Partial blocks go through `stage` ([16][16] f32), so nothing outside the
// output is read or written.
template <int T>
void start_block(const OutBlock& o, const Tile& t, int col0, float* stage) {
  if (t.first) {
    if (!t.bias) {
      amx::zero<T>();
      return;
    }
    const __mmask16 mask = col_mask(o.cols);
    const __m256i b = _mm256_maskz_loadu_epi16(mask, t.bias + col0);
    const __m512 row = _mm512_castsi512_ps(
        _mm512_maskz_slli_epi32(mask, _mm512_maskz_cvtepu16_epi32(mask, b), 16));
    _mm512_store_ps(stage, row);
    amx::load<T>(stage, 0);  // stride 0: every row is the bias
    return;
  }
  if (o.whole()) {
    amx::load<T>(o.p, t.ldo * 4);
    return;
  }
  const __mmask16 mask = col_mask(o.cols);
  for (int r = 0; r < 16; ++r)
    _mm512_store_ps(stage + r * 16, r < o.rows ? _mm512_maskz_loadu_ps(mask, o.p + r * t.ldo)
                                               : _mm512_setzero_ps());
  amx::load<T>(stage, 64);
}

template <int T>
void finish_block(const OutBlock& o, const Tile& t, float* stage) {
  if (o.whole()) {
    amx::store<T>(o.p, t.ldo * 4);
    return;
  }
  amx::store<T>(stage, 64);
  const __mmask16 mask = col_mask(o.cols);
  for (int r = 0; r < o.rows; ++r)
    _mm512_mask_storeu_ps(o.p + r * t.ldo, mask, _mm512_load_ps(stage + r * 16));
}

// Calls f(std::integral_constant<int, I>()) for I = 0 .. N-1 (tile numbers must be constants).
template <int N, class F>
inline void static_for(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>()), ...); }
  (std::make_integer_sequence<int, N>());
}

// One register tile of H halves (16 rows each) x NB blocks: C tile h * NB + j holds half h of
// block j. A tiles 4 (rows 0-15) and 5 (16-31); B tiles 6 and 7 with two halves, 5 to 7 in turn
// with one (H * NB <= 4 C tiles).
template <int H, int NB>
void tile_kernel(const Tile& t) {
  static_assert(H * NB <= 4 && (H == 1 || NB <= 2), "8 tiles");
  ensure_tiles();
  alignas(64) float stage[16 * 16];
  OutBlock o[H][NB];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < NB; ++j) {
      const int rows = t.rows - 16 * h, cols = t.ncols - 16 * j;
      o[h][j] = {t.out + h * 16 * t.ldo + j * 16, rows < 16 ? rows : 16, cols < 16 ? cols : 16};
    }
  static_for<H * NB>([&](auto c) { start_block<c>(o[c / NB][c % NB], t, 16 * (c % NB), stage); });

  const uint8_t* x = static_cast<const uint8_t*>(t.x);
  const int64_t ws = t.w_block_stride;
  // One 16-pair step: A tiles from the x panel, block j's B tile from b + j * b_block_stride.
  auto step = [&](const uint8_t* b, int64_t b_block_stride) {
    amx::load<4>(x, 64);
    if constexpr (H == 2) amx::load<5>(x + 16 * 64, 64);
    static_for<NB>([&](auto j) {
      constexpr int kB = H == 1 ? 5 + j % 3 : 6 + j;
      amx::load<kB>(b + j * b_block_stride, 64);
      amx::dp_bf16<j, 4, kB>();
      if constexpr (H == 2) amx::dp_bf16<NB + j, 5, kB>();
    });
    x += kPanelStepBytes;
  };
  const int64_t steps = t.kpairs / kStepPairs, rem = t.kpairs % kStepPairs;
  for (int64_t s = 0; s < steps; ++s) step(t.w + s * kStepBytes, ws);
  if (rem) {
    // The last pairs of k: a whole tile would read past the block, so its rem rows are copied
    // to zero-padded tiles (the x panel is zero there already).
    alignas(64) uint8_t tail[NB][kStepBytes];
    std::memset(tail, 0, sizeof tail);
    for (int j = 0; j < NB; ++j)
      std::memcpy(tail[j], t.w + j * ws + steps * kStepBytes, size_t(rem * kBlockPairBytes));
    step(tail[0], kStepBytes);
  }
  static_for<H * NB>([&](auto c) { finish_block<c>(o[c / NB][c % NB], t, stage); });
}

template <int H>
void tile_blocks(const Tile& t, int nb) {
  switch (nb) {
    case 1:
      return tile_kernel<H, 1>(t);
    case 2:
      return tile_kernel<H, 2>(t);
    case 3:
      if constexpr (H == 1) return tile_kernel<1, 3>(t);
      break;
    default:
      if constexpr (H == 1) return tile_kernel<1, 4>(t);
      break;
  }
  // Two halves of more than two blocks: two tiles of 32 columns at most.
  Tile left = t;
  left.ncols = 32;
  tile_kernel<2, 2>(left);
  Tile right = t;
  right.ncols = t.ncols - 32;
  right.out += 32;
  right.bias = t.bias ? t.bias + 32 : nullptr;
  right.w += 2 * t.w_block_stride;
  tile_blocks<2>(right, nb - 2);
}

void tile(const Tile& t) {
  const int nb = int((t.ncols + 15) / 16);
  t.rows > 16 ? tile_blocks<2>(t, nb) : tile_blocks<1>(t, nb);
}

#pragma GCC pop_options

}  // namespace

float amx_bf16_peak_loop(int64_t iters) {
  ensure_tiles();
  // Four independent C tiles, each A and B used twice: the tile unit's throughput.
  alignas(64) static const uint16_t zeros[16 * 32] = {};  // the values do not matter
  amx::load<4>(zeros, 64);
  amx::load<5>(zeros, 64);
  amx::load<6>(zeros, 64);
  amx::load<7>(zeros, 64);
  amx::zero<0>();
  amx::zero<1>();
  amx::zero<2>();
  amx::zero<3>();
  for (int64_t i = 0; i < iters; ++i) {
    amx::dp_bf16<0, 4, 6>();
    amx::dp_bf16<1, 4, 7>();
    amx::dp_bf16<2, 5, 6>();
    amx::dp_bf16<3, 5, 7>();
  }
  alignas(64) float out[16 * 16];
  amx::store<0>(out, 64);
  return out[0];
}

const KernelSet& amx_bf16_kernels() {
  // Measured on a 2-core Xeon with AMX (bench_gemm, Qwen3-0.6B shapes): sums kept in the tiles
  // over the whole k ran M = 512 at 1.5-2x the rate of 128-pair k blocks (each of which stores
  // and reloads 4 KiB of C); 2, 4 and 8 x panels an M block ran within the noise of each other.
  static const KernelSet set = [] {
    KernelSet s{};
    s.mr = kMr;
    s.nb = kNb;
    s.pair_bytes = 4;
    s.pack_x = pack_x;
    s.tile = tile;
    s.mc_panels = 4;
    s.kpair_align = kStepPairs;
    s.whole_k = true;
    s.one_panel_nb = kOnePanelNb;
    // M = 1 and 2 on gemm_amx_rows.cpp's FMA tiles (the same bits): measured on a 2-core Xeon
    // with AMX (bench_gemm, Qwen3-0.6B shapes), 86-94% of the read bandwidth against the tiles'
    // 78-84%; at M = 3 even, from M = 4 the tiles are faster (FMA tiles 70-83%).
    set_amx_bf16_rows_tiles(s);
    s.wide_min_m = 1;
    s.wide_max_m = 2;
    return s;
  }();
  return set;
}

}  // namespace nanovllm::cpu::detail
