// AVX2+FMA GEMM kernels on the shared packed weight layout (gemm_internal.h). Each 64-byte k-pair
// row of a 16-column block is widened to f32 in registers: the even k by a shift (the low half
// << 16), then the odd k by a mask (the high half). Each widened half meets every row of the
// tile before the next is made, so a 6-row tile holds 12 accumulators + 2 widened weights + 1
// broadcast x (15 of the 16 ymm) and spends 4 widening instructions per 24 FMAs: measured on a
// Zen 3, a 6 x 16 tile from L1 runs at 97% of the FMA loop's rate (a 4 x 16 tile that widens
// all four halves before the FMAs, as before, at 93%). Fewer rows cannot hide the FMA latency (4
// cycles, 2 dependent FMAs per k pair and accumulator), so 1- and 2-row tiles take 4 and 2 blocks.
//
// Weights from memory: a tile may be handed the next tile's weights (Tile::pf_next), which it
// prefetches spread over its own k loop, so that memory streams under the FMAs of every pass
// instead of stalling the first. A one- or two-row tile that reads its weights once prefetches
// them with prefetchnta instead (Tile::prefetch_nta).
//
// The blocked path's tiles may read a copy of their weight panel widened once per M block
// instead (widen_panel, tile_widened; gemm.cpp, kWidenMinPanels): on an Intel core the shift
// runs on an FMA port, on Zen 3 beside them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/gemm_internal.h"
#include "runtime/tensor.h"

namespace nanovllm::cpu::detail {
namespace {

constexpr int kMr = 6;      // rows per register tile: 12 accumulators
constexpr int kMaxNb = 4;   // blocks per register tile (1-row tiles)
// Near-ahead prefetch distance over all of a tile's weight streams (kPrefetchBytes / NB ahead
// in each of its NB blocks). Measured on a Zen 3 at M = 1 (4 streams): 1 KiB a stream streamed
// 45-49 GB/s where 2 KiB gave 37-44 on the same VM minutes apart.
constexpr int kPrefetchBytes = 4096;
// Packed x panels per M block of the blocked path: 32 x 6 rows x 128 k pairs x 8 bytes = 192
// KiB of x per k block, reused from L2 against each 8 KiB weight panel held in L1.
constexpr int kMcPanels = 32;

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// 8 f32 -> 8 f32 rounded to bf16 (nearest even; NaN stays a quiet NaN, as f32_to_bf16).
inline __m256 round_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int(0xffff0000u))));
}

// One row's k values [k0, k0 + kn) (kn even) as bf16-rounded f32 pairs into panel column d
// (stride mr pairs); past k (the odd k's last half) and for a missing row (src null): zeros.
void pack_row(float* d, const float* src, int64_t k, int64_t k0, int64_t kn, int64_t mr) {
  alignas(32) float row[1024];  // 1024 k at a time, rounded
  for (int64_t c0 = k0; c0 < k0 + kn; c0 += 1024) {
    const int64_t cn = std::min<int64_t>(1024, k0 + kn - c0);  // even
    const int64_t valid = src ? std::clamp<int64_t>(k - c0, 0, cn) : 0;
    int64_t i = 0;
    for (; i + 8 <= valid; i += 8)
      _mm256_store_ps(row + i, round_bf16(_mm256_loadu_ps(src + c0 + i)));
    for (; i < valid; ++i) row[i] = bf16_to_f32(f32_to_bf16(src[c0 + i]));
    for (; i < cn; ++i) row[i] = 0.0f;
    float* dc = d + ((c0 - k0) / 2) * mr * 2;
    for (int64_t p = 0; p < cn / 2; ++p) std::memcpy(dc + p * mr * 2, row + 2 * p, 8);
  }
}

// N = 4 or 2 rows from src (stride ldx) into the panel at their first pair: k below the last
// whole group of 8 as 4 pairs of each row rounded in registers, each pair's N rows one store
// (pairs as 64-bit lanes); the rest through pack_row.
template <int N>
void pack_rows(float* pan, const float* src, int64_t ldx, int64_t k, int64_t mr) {
  const int64_t k8 = k / 8 * 8, kn = (k + 1) / 2 * 2;
  auto rounded = [&](int i, int64_t k0) {
    return _mm256_castps_pd(round_bf16(_mm256_loadu_ps(src + i * ldx + k0)));
  };
  double* d = reinterpret_cast<double*>(pan);
  for (int64_t k0 = 0; k0 < k8; k0 += 8, d += 4 * mr) {
    const __m256d a = rounded(0, k0), b = rounded(1, k0);
    const __m256d ab02 = _mm256_unpacklo_pd(a, b);  // pairs: a0 b0 | a2 b2
    const __m256d ab13 = _mm256_unpackhi_pd(a, b);  // a1 b1 | a3 b3
    if constexpr (N == 4) {
      const __m256d c = rounded(2, k0), e = rounded(3, k0);
      const __m256d ce02 = _mm256_unpacklo_pd(c, e), ce13 = _mm256_unpackhi_pd(c, e);
      _mm256_storeu_pd(d, _mm256_permute2f128_pd(ab02, ce02, 0x20));           // pair 0
      _mm256_storeu_pd(d + mr, _mm256_permute2f128_pd(ab13, ce13, 0x20));      // pair 1
      _mm256_storeu_pd(d + 2 * mr, _mm256_permute2f128_pd(ab02, ce02, 0x31));  // pair 2
      _mm256_storeu_pd(d + 3 * mr, _mm256_permute2f128_pd(ab13, ce13, 0x31));  // pair 3
    } else {
      _mm_storeu_pd(d, _mm256_castpd256_pd128(ab02));
      _mm_storeu_pd(d + mr, _mm256_castpd256_pd128(ab13));
      _mm_storeu_pd(d + 2 * mr, _mm256_extractf128_pd(ab02, 1));
      _mm_storeu_pd(d + 3 * mr, _mm256_extractf128_pd(ab13, 1));
    }
  }
  for (int i = 0; i < N && k8 < kn; ++i)
    pack_row(pan + ((k8 / 2) * mr + i) * 2, src + i * ldx, k, k8, kn - k8, mr);
}

// x rows -> bf16-rounded f32 pairs in the [kpairs][mr][2] panel layout. Four rows at a time:
// 4 pairs of each rounded in registers and transposed as 64-bit lanes, so each pair's four rows
// leave as one 32-byte store in the panel's order. Before, each row went out alone, 8 bytes every
// mr pairs, so every line of a panel larger than L1 was fetched again for each of its rows.
// Measured on an Intel Xeon (family 6 model 207, avx512_fma, 2 threads), old and new alternating
// in one process, medians of 16: M = 2,048 o_proj 229 -> 247 GFLOP/s, down_proj 227 -> 246,
// qkv and gate_up +1-3%; the engine's prefill of 16 prompts 5.08-5.50 -> 4.57-5.00 s. The other
// rows, two at a time where two are left (the AVX2 tiles' 6-row panels), then one at a time, and
// every row's k past the last whole group of 8 (pack_row).
void pack_x(void* dst, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mr,
            int64_t panel_begin, int64_t panel_end) {
  const int64_t kpairs = (k + 1) / 2;
  float* out = static_cast<float*>(dst);
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    float* pan = out + panel * kpairs * mr * 2;
    const int64_t rows = std::clamp<int64_t>(m - panel * mr, 0, mr);  // rows of x in it
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) pack_rows<4>(pan + r * 2, x + (panel * mr + r) * ldx, ldx, k, mr);
    if (rows - r >= 2) {
      pack_rows<2>(pan + r * 2, x + (panel * mr + r) * ldx, ldx, k, mr);
      r += 2;
    }
    for (; r < mr; ++r)
      pack_row(pan + r * 2, r < rows ? x + (panel * mr + r) * ldx : nullptr, k, 0, 2 * kpairs, mr);
  }
}

inline __m256 bias_or_zero(const uint16_t* bias, int c) {
  if (!bias) return _mm256_setzero_ps();
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bias + c));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}

// Row r, block b of the tile's output: out = (bias or 0) + acc when first, else out + acc.
inline void store(const Tile& t, int r, int b, bool first, __m256 a0, __m256 a1) {
  float* o = t.out + r * t.ldo + 16 * b;
  const int cols = t.ncols - 16 * b < 16 ? t.ncols - 16 * b : 16;
  if (cols == 16) {
    const __m256 b0 = first ? bias_or_zero(t.bias, 16 * b) : _mm256_loadu_ps(o);
    const __m256 b1 = first ? bias_or_zero(t.bias, 16 * b + 8) : _mm256_loadu_ps(o + 8);
    _mm256_storeu_ps(o, _mm256_add_ps(b0, a0));
    _mm256_storeu_ps(o + 8, _mm256_add_ps(b1, a1));
    return;
  }
  alignas(32) float tmp[16];
  _mm256_store_ps(tmp, a0);
  _mm256_store_ps(tmp + 8, a1);
  for (int c = 0; c < cols; ++c) {
    const float base = first ? (t.bias ? bf16_to_f32(t.bias[16 * b + c]) : 0.0f) : o[c];
    o[c] = base + tmp[c];
  }
}

// Half h of 8 columns' k pairs (a 32-byte half of a pair row) as f32: h = 0 the even k (the
// low halves << 16), h = 1 the odd k (the high halves). The tiles and widen_panel's copy both
// widen through this.
inline __m256 widen_half(__m256i w, int h) {
  return _mm256_castsi256_ps(h ? _mm256_and_si256(w, _mm256_set1_epi32(int(0xffff0000u)))
                               : _mm256_slli_epi32(w, 16));
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
  int64_t credit = 0;
  const int64_t kpairs = t.kpairs;
  const bool prefetch = t.prefetch && !t.prefetch_nta;
  const bool prefetch_nta = t.prefetch && t.prefetch_nta;
  for (int64_t c0 = 0; c0 < t.kpairs; c0 += kSumChunkPairs) {
    const int64_t c1 = t.kpairs - c0 < kSumChunkPairs ? t.kpairs : c0 + kSumChunkPairs;
    const bool first = t.first && c0 == 0;
    __m256 acc[R][NB][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) acc[r][b][0] = acc[r][b][1] = _mm256_setzero_ps();
    for (int64_t p = c0; p < c1; ++p) {
      if (prefetch)
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(w + b * ws + kPrefetchBytes / NB),
                       _MM_HINT_T0);
      if (prefetch_nta)
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(w + b * ws + kStreamOnceAheadBytes),
                       _MM_HINT_NTA);
      for (credit += pf_lines; credit >= kpairs; credit -= kpairs, pf += 64)
        _mm_prefetch(pf, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        const uint8_t* wb = w + b * ws;
        __m256i w0, w1;
        if constexpr (!Widened) {
          w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb));
          w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + 32));
        }
        // Half h of the pair (0: the even k, 1: the odd k), its 16 columns as f32 in lo, hi8.
        auto half = [&](int h, __m256& lo, __m256& hi8) {
          if constexpr (Widened) {
            lo = _mm256_load_ps(reinterpret_cast<const float*>(wb) + 16 * h);
            hi8 = _mm256_load_ps(reinterpret_cast<const float*>(wb) + 16 * h + 8);
          } else {
            lo = widen_half(w0, h);
            hi8 = widen_half(w1, h);
          }
        };
        {  // even k of the pair: all rows
          __m256 lo, hi8;
          half(0, lo, hi8);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m256 xe = _mm256_broadcast_ss(x + 2 * r);
            acc[r][b][0] = _mm256_fmadd_ps(lo, xe, acc[r][b][0]);
            acc[r][b][1] = _mm256_fmadd_ps(hi8, xe, acc[r][b][1]);
          }
        }
        {  // odd k
          __m256 lo, hi8;
          half(1, lo, hi8);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m256 xo = _mm256_broadcast_ss(x + 2 * r + 1);
            acc[r][b][0] = _mm256_fmadd_ps(lo, xo, acc[r][b][0]);
            acc[r][b][1] = _mm256_fmadd_ps(hi8, xo, acc[r][b][1]);
          }
        }
      }
      w += Widened ? 2 * kBlockPairBytes : kBlockPairBytes;
      x += xs2;
    }

#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) store(t, r, b, first, acc[r][b][0], acc[r][b][1]);
  }
}

// Blocks per tile for a tile of `rows` rows: enough independent accumulators to cover the FMA
// latency (8 or more), at most 12.
constexpr int wide_nb(int rows) { return rows == 1 ? 4 : rows == 2 ? 2 : 1; }

constexpr auto kTable = tile_table<kMr, kMaxNb>([](auto r, auto nb) -> TileFn {
  constexpr int R = decltype(r)::value, NB = decltype(nb)::value;
  if constexpr (NB <= wide_nb(R))
    return tile_kernel<R, NB>;
  else
    return nullptr;
});

void tile(const Tile& t) { run_tile<kMaxNb>(kTable, t); }

// The blocked path's tiles (up to kMr rows x 1 block) over widen_panel's copy.
constexpr auto kTableWidened = tile_table<kMr, 1>([](auto r, auto nb) -> TileFn {
  return tile_kernel<decltype(r)::value, decltype(nb)::value, true>;
});

void tile_widened(const Tile& t) { run_tile<1>(kTableWidened, t); }

// KernelSet::widen_panel: each pair's 16 even k, then its 16 odd k (widen_half).
void widen_panel(float* dst, const uint8_t* w, int64_t block_stride, int nb, int64_t kpairs) {
  for (int b = 0; b < nb; ++b)
    for (int64_t p = 0; p < kpairs; ++p, dst += 32) {
      const uint8_t* src = w + b * block_stride + p * kBlockPairBytes;
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(src));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + 32));
      for (int h = 0; h < 2; ++h) {
        _mm256_store_ps(dst + 16 * h, widen_half(w0, h));
        _mm256_store_ps(dst + 16 * h + 8, widen_half(w1, h));
      }
    }
}

#pragma GCC pop_options

}  // namespace

const KernelSet& avx2_kernels() {
  static const KernelSet set = [] {
    KernelSet s{};
    s.mr = kMr;
    s.nb = 1;
    s.pair_bytes = 8;
    s.pack_x = pack_x;
    s.tile = tile;
    s.wide_max_rows = kMr;
    s.wide_nb = wide_nb;
    s.tile_wide = tile;
    s.wide_min_m = 1;
    s.wide_max_m = 48;
    s.mc_panels = kMcPanels;
    s.balance_panels = true;
    s.prefetch_next = true;
    // Decode of one or two sequences (tiles of 4 and 2 blocks, bound by memory) reads its
    // weights behind prefetchnta (gemm_internal.h, kStreamOnceAheadBytes). Measured on a
    // first-generation Zen (AMD EPYC family 23 model 1, 2 threads), bench_gemm, two interleaved
    // rounds against prefetcht0 1 KiB ahead in each stream: lm_head (151,936 x 1,024) M = 1
    // 11.9-13.2 ms against 14.0-14.2, M = 2 13.4-13.7 against 15.1-15.3; M = 4 (4 rows x 1
    // block at 75-80% of the FMA peak) 2-4% slower with it, so from 3 rows on the tiles keep
    // prefetcht0.
    s.one_pass_nta_max_rows = 2;
    s.widen_panel = widen_panel;
    s.tile_widened = tile_widened;
    return s;
  }();
  return set;
}

}  // namespace nanovllm::cpu::detail
