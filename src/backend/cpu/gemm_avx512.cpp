// AVX-512 BF16 GEMM kernels: x packed to bf16 pairs, one vdpbf16ps per (row, 16-column block,
// k-pair). Wide tiles (tile_wide) serve M = 7..32: all rows (up to 24) in one register tile.
// Compiled for the AVX-512 BF16 target per function (pragma below); only reached when
// detect_gemm_isa() found the instructions.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "backend/cpu/gemm_internal.h"

namespace nanovllm::cpu::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,bmi2")

constexpr int kMr = 6;  // 6 rows x 4 blocks = 24 zmm accumulators + 4 weights + 1 broadcast
constexpr int kNb = 4;
// Software prefetch distance for weight streams read from memory (bytes ahead, per stream).
constexpr int kPrefetchBytes = 1024;

// 16 x values from src (those below `left`; zeros past it) -> 8 bf16 pairs (nearest even).
inline __m256i bf16_pairs(const float* src, int64_t left) {
  const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
  return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src));
}

// One row's k values [k0, k) as bf16 pairs into panel column d (stride mr pairs), the odd k's
// last half zero; a missing row (src null): zeros.
void pack_row(uint32_t* d, const float* src, int64_t k, int64_t k0, int64_t mr) {
  alignas(64) uint32_t row_pairs[512];  // 1024 k at a time
  for (int64_t c0 = k0; c0 < k; c0 += 1024) {
    const int64_t kn = k - c0 < 1024 ? k - c0 : 1024;
    const int64_t np = (kn + 1) / 2;
    if (src) {
      for (int64_t i = 0; i < kn; i += 16)
        _mm256_store_si256(reinterpret_cast<__m256i*>(row_pairs + i / 2),
                           bf16_pairs(src + c0 + i, kn - i));
    } else {
      for (int64_t i = 0; i < np; ++i) row_pairs[i] = 0;
    }
    uint32_t* dc = d + ((c0 - k0) / 2) * mr;
    for (int64_t p = 0; p < np; ++p) dc[p * mr] = row_pairs[p];
  }
}

// N = 4 or 2 rows from src (stride ldx) into the panel at their first pair: k below the last
// whole group of 16 as 8 bf16 pairs of each row, transposed so that each pair's N rows leave as
// one store (16 or 8 bytes); the rest through pack_row.
template <int N>
void pack_rows(uint32_t* pan, const float* src, int64_t ldx, int64_t k, int64_t mr) {
  const int64_t k16 = k / 16 * 16;
  uint32_t* d = pan;
  for (int64_t k0 = 0; k0 < k16; k0 += 16, d += 8 * mr) {
    const __m256i a = bf16_pairs(src + k0, 16), b = bf16_pairs(src + ldx + k0, 16);
    const __m256i ab0 = _mm256_unpacklo_epi32(a, b);  // a0 b0 a1 b1 | a4 b4 a5 b5
    const __m256i ab2 = _mm256_unpackhi_epi32(a, b);  // a2 b2 a3 b3 | a6 b6 a7 b7
    if constexpr (N == 4) {
      const __m256i c = bf16_pairs(src + 2 * ldx + k0, 16);
      const __m256i e = bf16_pairs(src + 3 * ldx + k0, 16);
      const __m256i ce0 = _mm256_unpacklo_epi32(c, e), ce2 = _mm256_unpackhi_epi32(c, e);
      const __m256i q[4] = {_mm256_unpacklo_epi64(ab0, ce0),   // pairs 0 | 4
                            _mm256_unpackhi_epi64(ab0, ce0),   // 1 | 5
                            _mm256_unpacklo_epi64(ab2, ce2),   // 2 | 6
                            _mm256_unpackhi_epi64(ab2, ce2)};  // 3 | 7
      for (int i = 0; i < 4; ++i) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i * mr), _mm256_castsi256_si128(q[i]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (i + 4) * mr),
                         _mm256_extracti128_si256(q[i], 1));
      }
    } else {
      const __m256i q[2] = {ab0, ab2};  // pairs 0 1 | 4 5, 2 3 | 6 7
      for (int i = 0; i < 2; ++i) {
        const __m128i lo = _mm256_castsi256_si128(q[i]), hi = _mm256_extracti128_si256(q[i], 1);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(d + (2 * i) * mr), lo);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(d + (2 * i + 1) * mr),
                         _mm_unpackhi_epi64(lo, lo));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(d + (2 * i + 4) * mr), hi);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(d + (2 * i + 5) * mr),
                         _mm_unpackhi_epi64(hi, hi));
      }
    }
  }
  for (int i = 0; i < N && k16 < k; ++i)
    pack_row(pan + (k16 / 2) * mr + i, src + i * ldx, k, k16, mr);
}

// x rows -> bf16 (round to nearest even), written as pairs into the [kpairs][mr] panel layout.
// Four rows at a time, 8 pairs of each transposed in registers so that each pair's four rows
// leave as one 16-byte store (two rows: 8 bytes), as the AVX2 kernels' pack_x; the other rows,
// and every row's k past the last whole group of 16, one at a time. Measured on an Intel Xeon
// (family 6 model 207; this set's GEMM is slow there, so the pack alone), M = 2,048, 6-row
// panels, one thread, old and new alternating, medians of 15: K = 1,024 0.85 -> 0.57 ms, K =
// 3,072 2.95 -> 2.12 ms. Not measured on a Zen 4, where this set runs.
void pack_x(void* dst, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mr,
            int64_t panel_begin, int64_t panel_end) {
  const int64_t kpairs = (k + 1) / 2;
  uint32_t* out = static_cast<uint32_t*>(dst);
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    uint32_t* pan = out + panel * kpairs * mr;
    const int64_t rows = std::clamp<int64_t>(m - panel * mr, 0, mr);  // rows of x in it
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) pack_rows<4>(pan + r, x + (panel * mr + r) * ldx, ldx, k, mr);
    if (rows - r >= 2) {
      pack_rows<2>(pan + r, x + (panel * mr + r) * ldx, ldx, k, mr);
      r += 2;
    }
    for (; r < mr; ++r)
      pack_row(pan + r, r < rows ? x + (panel * mr + r) * ldx : nullptr, k, 0, mr);
  }
}

inline __mmask16 col_mask(int ncols, int col0) {
  const int left = ncols - col0;
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

// Tile::pf_next (the next group's weights, spread over the k loop) is honoured by every tile;
// the driver hands it to the wide tiles' passes only (KernelSet::wide_prefetch_next).
// PFD: software prefetch distance (bytes ahead in each weight stream) when PF.
// EB: x broadcast embedded in each vdpbf16ps ({1to16} memory operand) rather than broadcast
// once into a register.
template <int R, int NB, bool PF, int PFD = kPrefetchBytes, bool EB = false>
void tile_kernel(const Tile& t) {
  const uint8_t* w = t.w;
  const int64_t ws = t.w_block_stride;
  const uint32_t* x = static_cast<const uint32_t*>(t.x);
  const int64_t xs = t.xs;
  // The next tile's weights (Tile::pf_next): pf_lines lines spread over t.kpairs pairs.
  const char* pf = reinterpret_cast<const char*>(t.pf_next);
  const int64_t pf_lines = t.pf_next ? (t.pf_bytes + 63) / 64 : 0;
  const int64_t kpairs = t.kpairs;
  int64_t credit = 0;
  // One summation chunk at a time (gemm_internal.h): the chain restarts at zero per chunk.
  for (int64_t c0 = 0; c0 < t.kpairs; c0 += kSumChunkPairs) {
    const int64_t c1 = t.kpairs - c0 < kSumChunkPairs ? t.kpairs : c0 + kSumChunkPairs;
    const bool first = t.first && c0 == 0;
    __m512 acc[R][NB];
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_ps();
    for (int64_t p = c0; p < c1; ++p) {
      for (credit += pf_lines; credit >= kpairs; credit -= kpairs, pf += 64)
        _mm_prefetch(pf, _MM_HINT_T0);
      __m512i wv[NB];
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j) {
        wv[j] = _mm512_load_si512(w + j * ws);
        if constexpr (PF)
          _mm_prefetch(reinterpret_cast<const char*>(w + j * ws + PFD), _MM_HINT_T0);
      }
#pragma GCC unroll 32
      for (int r = 0; r < R; ++r) {
        if constexpr (EB) {
#pragma GCC unroll 4
          for (int j = 0; j < NB; ++j)
            asm("vdpbf16ps %[x]%{1to16%}, %[w], %[acc]"
                : [acc] "+v"(acc[r][j])
                : [x] "m"(x[r]), [w] "v"(wv[j]));
        } else {
          const __m512i xb = _mm512_set1_epi32(int(x[r]));
#pragma GCC unroll 4
          for (int j = 0; j < NB; ++j)
            acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)wv[j], (__m512bh)xb);
        }
      }
      w += kBlockPairBytes;
      x += xs;
    }

    for (int j = 0; j < NB; ++j) {
      const int col0 = j * 16;
      if (col0 >= t.ncols) break;
      const __mmask16 mask = col_mask(t.ncols, col0);
      __m512 bias = _mm512_setzero_ps();
      if (first && t.bias) {
        __m256i b = _mm256_maskz_loadu_epi16(mask, t.bias + col0);
        // maskz forms: GCC 12 warns (-Wmaybe-uninitialized) on the unmasked ones.
        bias = _mm512_castsi512_ps(
            _mm512_maskz_slli_epi32(mask, _mm512_maskz_cvtepu16_epi32(mask, b), 16));
      }
#pragma GCC unroll 32
      for (int r = 0; r < R; ++r) {
        float* o = t.out + r * t.ldo + col0;
        __m512 base = first ? bias : _mm512_maskz_loadu_ps(mask, o);
        _mm512_mask_storeu_ps(o, mask, _mm512_add_ps(base, acc[r][j]));
      }
    }
  }
}

template <int R, bool PF>
TileFn pick_nb(int nb) {
  switch (nb) {
    case 1:
      return tile_kernel<R, 1, PF>;
    case 2:
      return tile_kernel<R, 2, PF>;
    case 3:
      return tile_kernel<R, 3, PF>;
    default:
      return tile_kernel<R, 4, PF>;
  }
}

template <bool PF>
TileFn pick(int rows, int nb) {
  switch (rows) {
    case 1:
      return pick_nb<1, PF>(nb);
    case 2:
      return pick_nb<2, PF>(nb);
    case 3:
      return pick_nb<3, PF>(nb);
    case 4:
      return pick_nb<4, PF>(nb);
    case 5:
      return pick_nb<5, PF>(nb);
    default:
      return pick_nb<6, PF>(nb);
  }
}

void tile(const Tile& t) {
  const int nb = int((t.ncols + 15) / 16);
  TileFn fn = t.prefetch ? pick<true>(t.rows, nb) : pick<false>(t.rows, nb);
  fn(t);
}

// Wide tiles (small batches): up to kWideMaxRows rows x wide_nb(rows) blocks, at most
// kWideAcc accumulators (the rest of the 32 zmm: weights and the x broadcast).
constexpr int kWideMaxRows = 24;
constexpr int kWideAcc = 24;
constexpr int kWideMaxNb = 3;
// Prefetch distance of the wide tiles, over all their weight streams (kWidePrefetchBytes / nb
// ahead in each): a 16-row tile spends ~8 cycles per 64-byte weight row, so memory latency
// needs ~8 KiB in flight per core (measured: 2 and 4 KiB are 10-20% slower at M = 16).
constexpr int kWidePrefetchBytes = 8192;

int wide_nb(int rows) {
  const int nb = kWideAcc / (rows < 1 ? 1 : rows);
  return nb < 1 ? 1 : (nb > kWideMaxNb ? kWideMaxNb : nb);
}

constexpr auto kWideTable = tile_table<kWideMaxRows, kWideMaxNb>([](auto r, auto nb) -> TileFn {
  constexpr int R = decltype(r)::value, NB = decltype(nb)::value;
  if constexpr (R * NB <= kWideAcc || NB == 1)
    return tile_kernel<R, NB, true, kWidePrefetchBytes / NB / 64 * 64, NB == 1>;
  else
    return nullptr;
});

void tile_wide(const Tile& t) { run_tile<kWideMaxNb>(kWideTable, t); }

#pragma GCC pop_options

static_assert(kNb * 16 <= 64, "tile width");

}  // namespace

const KernelSet& avx512_bf16_kernels() {
  static const KernelSet set = [] {
    KernelSet s{};
    s.mr = kMr;
    s.nb = kNb;
    s.pair_bytes = 4;
    s.pack_x = pack_x;
    s.tile = tile;
    s.wide_max_rows = kWideMaxRows;
    s.wide_nb = wide_nb;
    s.tile_wide = tile_wide;
    s.wide_min_m = 7;
    s.wide_max_m = 32;
    s.mc_panels = 128;
    s.balance_panels = false;
    s.prefetch_next = false;
    // Two passes (M = 17..32): each pass prefetches a share of the thread's next group, so the
    // weights stream under the second pass as well. On a Zen 4 (2 threads), the GEMMs of a
    // Qwen3-0.6B decode step (1.19 GB, from memory) at M = 32, alternated in one process: 8 of
    // 8 rounds faster, 100.8-105.5 ms against 103.9-109.0 with the near-ahead prefetch in each
    // pass (into L2 instead of L1: even); M = 20 and 24 even.
    s.wide_prefetch_next = true;
    // Decode (M <= 6) streams its weights on the hardware prefetchers alone. Measured on a Zen 4
    // (AMD family 25 model 17, 2 threads): a scratch probe of this tile's loads, prefetch and
    // vdpbf16ps over 1 GiB, ten interleaved rounds: 4 streams with the prefetch 1 KiB ahead in
    // each 19-31 GB/s, without it 28-33, plain sequential loads 29-34 (in rounds where the VM
    // gave more bandwidth: 26-34 against 37-43, plain 42-51). The kernels themselves on a decode
    // step's GEMVs of Qwen3-0.6B (1.19 GB), alternated in one process: M = 1 medians 37.2 ms
    // without against 38.9 with (faster in 13 of 20 rounds), M = 4 faster in 7 of 8. The wide
    // tiles (M >= 7, busy with the multiply-adds) keep theirs: M = 16 took 68-76 ms without it
    // against 57-65 with it. This set runs where the CPU has vdpbf16ps but no AMX: Zen 4 and 5.
    s.one_panel_prefetch = false;
    return s;
  }();
  return set;
}

}  // namespace nanovllm::cpu::detail
