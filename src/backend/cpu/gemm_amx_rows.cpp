// The AMX BF16 kernels' sums for a few rows, computed with AVX-512 FMAs: the same bits as the
// tiles (gemm_amx.cpp), at the read bandwidth where the tiles stream the weights slower.
//
// What tdpbf16ps computes (measured on a Xeon with AMX, bit for bit, and what Intel's manual
// describes): for each output, each instruction (16 k pairs) runs two f32 FMA chains from zero,
// one over the even k of the pairs and one over the odd k, in pair order, then adds their sum to
// the accumulator: acc += (even + odd). Every operation rounds to nearest even, with input
// denormals read as zero and output denormals flushed (DAZ and FTZ, whatever MXCSR says). This
// kernel runs exactly those operations, with MXCSR set to DAZ | FTZ for its duration; the k pairs
// past the last 16-pair step's end, which the tiles multiply as zeros, add +0 to each chain.
//
// Why: with one x row (decode) the tiles stream the weights at 78-84% of the read bandwidth
// against 89-90% for the AVX-512 FMA kernels (Xeon with AMX, 2 cores), and AMX must serve every
// M once chosen for batch invariance. These tiles serve M = 1 and 2 (KernelSet::wide_*) with the
// AMX bits, at 86-94% there (bench_gemm; M = 3 ran even with the tiles, 4-6 slower).
// x is packed as bf16-rounded f32 pairs ([kpairs][mr][2], the conversion the tiles' packing
// does), the weights are the packed blocks as they are.
#include <immintrin.h>

#include <array>
#include <utility>

#include "backend/cpu/gemm_internal.h"

namespace nanovllm::cpu::detail {
namespace {

constexpr int kMaxRows = 8;     // rows per tile
constexpr int kMaxNb = 4;       // 16-column blocks per tile
constexpr int kStepPairs = 16;  // k pairs per tdpbf16ps
// Near-ahead prefetch distance over all of a tile's weight streams (as the FMA kernels').
constexpr int kPrefetchBytes = 4096;
constexpr unsigned kDazFtz = 0x8040;  // MXCSR: flush to zero (bit 15), denormals are zero (6)

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")

// x rows -> [kpairs][mr][2] f32 holding bf16 values (vcvtneps2bf16, as the tiles' pack_x);
// rows past m and the odd k's last half are zero. Not the AVX2 kernels' pack_x (the same layout):
// it rounds f32 denormals to nearest, so the largest become the smallest normal bf16, which DAZ
// does not zero, where vcvtneps2bf16 gives a signed zero as the tiles read it.
void pack_x(void* dst, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mr,
            int64_t panel_begin, int64_t panel_end) {
  const int64_t kpairs = (k + 1) / 2;
  float* out = static_cast<float*>(dst);
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    float* pan = out + panel * kpairs * mr * 2;
    for (int64_t r = 0; r < mr; ++r) {
      const int64_t row = panel * mr + r;
      for (int64_t k0 = 0; k0 < kpairs * 2; k0 += 16) {
        const int64_t left = row < m ? k - k0 : 0;
        const __mmask16 mask = left >= 16  ? __mmask16(0xffff)
                               : left <= 0 ? __mmask16(0)
                                           : __mmask16((1u << left) - 1);
        const __m256i bf =
            (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + row * ldx + k0));
        alignas(64) float v[16];
        _mm512_store_ps(v, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
                               0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bf), 16)));
        const int64_t pairs = kpairs - k0 / 2 < 8 ? kpairs - k0 / 2 : 8;
        for (int64_t p = 0; p < pairs; ++p) {
          pan[((k0 / 2 + p) * mr + r) * 2] = v[2 * p];
          pan[((k0 / 2 + p) * mr + r) * 2 + 1] = v[2 * p + 1];
        }
      }
    }
  }
}

// Output row r, block b: the accumulator's start (bias or zero when first, else the output).
inline __m512 start(const Tile& t, int r, int b, __mmask16 m) {
  if (!t.first) return _mm512_maskz_loadu_ps(m, t.out + r * t.ldo + 16 * b);
  if (!t.bias) return _mm512_setzero_ps();
  const __m256i b16 = _mm256_maskz_loadu_epi16(m, t.bias + 16 * b);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(m, _mm512_maskz_cvtepu16_epi32(m, b16), 16));
}

// out[R rows, NB blocks] = x panel @ weight blocks over the whole k, in tdpbf16ps's order.
template <int R, int NB>
void tile_kernel(const Tile& t) {
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kDazFtz);
  const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
  const int64_t ws = t.w_block_stride;
  const float* x = static_cast<const float*>(t.x);
  const int64_t xs2 = t.xs * 2;
  __mmask16 mask[NB];
  for (int b = 0; b < NB; ++b) {
    const int cols = t.ncols - 16 * b < 16 ? t.ncols - 16 * b : 16;
    mask[b] = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  }
  alignas(64) float acc[R][NB][16];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) _mm512_store_ps(acc[r][b], start(t, r, b, mask[b]));

  const uint8_t* w = t.w;
  for (int64_t s0 = 0; s0 < t.kpairs; s0 += kStepPairs) {
    const int64_t s1 = t.kpairs - s0 < kStepPairs ? t.kpairs : s0 + kStepPairs;
    __m512 even[R][NB], odd[R][NB];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) even[r][b] = odd[r][b] = _mm512_setzero_ps();
    for (int64_t p = s0; p < s1; ++p) {
      if (t.prefetch)
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(w + b * ws + kPrefetchBytes / NB),
                       _MM_HINT_T0);
      __m512 we[NB], wo[NB];
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const __m512i wv = _mm512_load_si512(reinterpret_cast<const void*>(w + b * ws));
        we[b] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wv, 16));
        wo[b] = _mm512_castsi512_ps(_mm512_and_si512(wv, hi));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 xe = _mm512_set1_ps(x[2 * r]);
        const __m512 xo = _mm512_set1_ps(x[2 * r + 1]);
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) {
          even[r][b] = _mm512_fmadd_ps(xe, we[b], even[r][b]);
          odd[r][b] = _mm512_fmadd_ps(xo, wo[b], odd[r][b]);
        }
      }
      w += kBlockPairBytes;
      x += xs2;
    }
    // A short last step: the tiles multiply the missing pairs as zeros, which turns a -0 chain
    // into +0 (and changes nothing else).
    const bool padded = s1 - s0 < kStepPairs;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        __m512 e = even[r][b], o = odd[r][b];
        if (padded) {
          e = _mm512_add_ps(e, _mm512_setzero_ps());
          o = _mm512_add_ps(o, _mm512_setzero_ps());
        }
        _mm512_store_ps(acc[r][b], _mm512_add_ps(_mm512_load_ps(acc[r][b]), _mm512_add_ps(e, o)));
      }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b)
      _mm512_mask_storeu_ps(t.out + r * t.ldo + 16 * b, mask[b], _mm512_load_ps(acc[r][b]));
  _mm_setcsr(csr);
}

// Blocks per tile for `rows` rows: as many as fit the registers (2 chains a row and block, 2
// widened weights a block, 2 x broadcasts), 1 to kMaxNb.
constexpr int wide_nb_of(int rows) {
  int nb = kMaxNb;
  while (nb > 1 && 2 * rows * nb + 2 * nb + 2 > 32) --nb;
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

#pragma GCC pop_options

}  // namespace

void set_amx_bf16_rows_tiles(KernelSet& s) {
  s.wide_max_rows = kMaxRows;
  s.wide_nb = wide_nb;
  s.tile_wide = tile;
  s.wide_pack_x = pack_x;
  s.wide_pair_bytes = 8;
}

}  // namespace nanovllm::cpu::detail
