// AVX-512 VNNI tiles of the quantized GEMM (qgemm.h), on the AVX2 tiles' packed layout.
// One zmm holds two blocks of 8 columns at the same k (two 32-byte loads, the second inserted in
// the upper half), so each broadcast x code meets 16 columns per instruction:
//   int8 weights: vpdpwssd multiplies 16 x 2 int16 pairs and adds them into the int32 sums in
//     one instruction (AVX2: vpmaddwd and vpaddd, on 8 columns).
//   int4 weights: vpdpbusd multiplies the unsigned 4-bit codes (as bytes) by 4 int8 x codes and
//     adds the 4 products into int32 in one instruction (AVX2: vpmaddubsw, vpaddw, and a
//     vpmaddwd per 32 k to widen, on 8 columns).
// The integer sums are exact on both paths and each group's is flushed to f32 by the same
// operations in the same order, so these tiles give the AVX2 tiles' results bit for bit.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/qgemm.h"
#include "util/check.h"

namespace nanovllm::cpu::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
// GCC 12 warns (-Wmaybe-uninitialized) inside the unmasked intrinsics (their _mm512_undefined
// pass-through); full-mask maskz forms compile to the same instructions without it.
constexpr __mmask16 kAll16 = 0xffff;
constexpr __mmask8 kAll8 = 0xff;

// The 32 bytes at offset `off` of blocks a (low half) and b (high half): two broadcast loads,
// the second one masked into the high half.
inline __m512i load_pair(const uint8_t* a, const uint8_t* b, int64_t off) {
  const __m512i lo =
      _mm512_maskz_broadcast_i64x4(kAll8, _mm256_load_si256(reinterpret_cast<const __m256i*>(a + off)));
  return _mm512_mask_broadcast_i64x4(lo, 0xf0,
                                     _mm256_load_si256(reinterpret_cast<const __m256i*>(b + off)));
}

// The 8 f16 values at a (low half) and b (high half), as f32.
inline __m512 load_f16_pair(const uint8_t* a, const uint8_t* b) {
  const __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_load_si128(reinterpret_cast<const __m128i*>(b)), 1);
  return _mm512_maskz_cvtph_ps(kAll16, h);
}

inline __m512 load_f32_pair(const uint8_t* a, const uint8_t* b) {
  const __m512 lo =
      _mm512_maskz_broadcast_f32x8(kAll16, _mm256_load_ps(reinterpret_cast<const float*>(a)));
  return _mm512_mask_broadcast_f32x8(lo, 0xff00, _mm256_load_ps(reinterpret_cast<const float*>(b)));
}

inline __m512i broadcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Integer accumulator chains a tile keeps per (row, pair): in a tile of one or two sums each
// waits on vpdpwssd / vpdpbusd's latency (two dependent ones per 64 bytes of weights: about
// 18 GB/s a core at 2.8 GHz, near what one row's decode streams), so small tiles put the even
// and the odd products in two chains and add them at the group's end. The sums are exact
// integers: the same bits either way.
template <int R, int NP>
inline constexpr int kChains = R * NP < 4 ? 2 : 1;

template <int C, int R, int NP>
inline __m512i chain_sum(const __m512i (&acc)[C][R][NP], int r, int p) {
  __m512i s = acc[0][r][p];
  for (int c = 1; c < C; ++c) s = _mm512_add_epi32(s, acc[c][r][p]);
  return s;
}

// out[0, n) = v (+ bf16 bias), n <= 16.
inline void store16(float* out, __m512 v, const uint16_t* bias, int n) {
  const __mmask16 m = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
  if (bias) {
    const __m512i b = _mm512_maskz_cvtepu16_epi32(kAll16, _mm256_maskz_loadu_epi16(m, bias));
    v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, b, 16)));
  }
  _mm512_mask_storeu_ps(out, m, v);
}

// The tile's blocks as NP pairs (a missing second block reads the first; its sums are dropped).
template <int NP>
inline void block_pairs(const QTile& t, const uint8_t* (&w)[2 * NP]) {
  const int blocks = (t.ncols + 7) / 8;
  for (int i = 0; i < 2 * NP; ++i)
    w[i] = t.w + size_t(i < blocks ? i : 0) * t.layout->block_bytes;
}

// int8 codes, with a scale per group (GROUPED) or per row; x int16.
template <int R, int NP, bool GROUPED>
void qtile8(const QTile& t) {
  const int16_t* x = static_cast<const int16_t*>(t.x);
  const QuantLayout& l = *t.layout;
  const uint8_t* w[2 * NP];
  block_pairs<NP>(t, w);
  __m512 accf[R][NP];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < NP; ++p) accf[r][p] = _mm512_setzero_ps();
  }
  [[maybe_unused]] __m512 wscale[NP];
  int64_t off = 0;  // bytes into every block
  if constexpr (!GROUPED) {
    for (int p = 0; p < NP; ++p) wscale[p] = load_f32_pair(w[2 * p], w[2 * p + 1]);
    off = 32;
  }
  const size_t ahead = prefetch_ahead(R <= kQMaxRows, 2 * NP, l.block_bytes);
  const bool prefetch = R > 1 || t.row_prefetch;
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t pairs = l.group_len(g) / 2;
    const int16_t* xg = x + g * l.kg;
    [[maybe_unused]] __m512 scale[NP];
    if constexpr (GROUPED) {
      for (int p = 0; p < NP; ++p) scale[p] = load_f32_pair(w[2 * p] + off, w[2 * p + 1] + off);
      off += 32;
    }
    __m512i acc[kChains<R, NP>][R][NP];
    for (auto& a : acc) {
      for (int r = 0; r < R; ++r) {
        for (int p = 0; p < NP; ++p) a[r][p] = _mm512_setzero_si512();
      }
    }
    for (int64_t pr = 0; pr < pairs; pr += 2) {
      const int64_t o = off + pr * 16;
      for (int p = 0; p < NP; ++p) {
        for (int i = 2 * p; i < 2 * p + 2 && prefetch; ++i)
          _mm_prefetch(ahead_of(w[i], size_t(o), ahead, R <= kQMaxRows, 2 * NP, l.block_bytes),
                       _MM_HINT_T0);
        const __m512i raw = load_pair(w[2 * p], w[2 * p + 1], o);
        const __m512i q0 = _mm512_srai_epi16(_mm512_slli_epi16(raw, 8), 8);
        const __m512i q1 = _mm512_srai_epi16(raw, 8);
        for (int r = 0; r < R; ++r) {
          const int16_t* xp = xg + r * t.ldx + 2 * pr;
          acc[0][r][p] = _mm512_dpwssd_epi32(acc[0][r][p], q0, broadcast32(xp));
          acc[kChains<R, NP> - 1][r][p] =
              _mm512_dpwssd_epi32(acc[kChains<R, NP> - 1][r][p], q1, broadcast32(xp + 2));
        }
      }
    }
    off += pairs * 16;
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < NP; ++p) {
        const __m512 s = _mm512_maskz_cvtepi32_ps(kAll16, chain_sum(acc, r, p));
        if constexpr (GROUPED) {
          accf[r][p] = _mm512_fmadd_ps(s, scale[p], accf[r][p]);
        } else {
          accf[r][p] = _mm512_add_ps(accf[r][p], s);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 xs = _mm512_set1_ps(t.xscale[r]);
    for (int p = 0; p < NP; ++p) {
      const int n = t.ncols - p * 16;
      if (n <= 0) break;
      __m512 v = _mm512_mul_ps(accf[r][p], xs);
      if constexpr (!GROUPED) v = _mm512_mul_ps(v, wscale[p]);
      store16(t.out + r * t.ldo + p * 16, v, t.bias ? t.bias + p * 16 : nullptr, n);
    }
  }
}

// int4 codes with a scale and zero per group; x int8 with a scale per group.
template <int R, int NP>
void qtile4(const QTile& t) {
  const QuantLayout& l = *t.layout;
  const int8_t* x = static_cast<const int8_t*>(t.x);
  const uint8_t* w[2 * NP];
  block_pairs<NP>(t, w);
  __m512 accf[R][NP];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < NP; ++p) accf[r][p] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const size_t ahead = prefetch_ahead(R <= kQMaxRows, 2 * NP, l.block_bytes);
  const bool prefetch = R > 1 || t.row_prefetch;
  int64_t off = 0;
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t rows8 = l.group_len(g) / 8;  // 32-byte rows of 8 k
    const int8_t* xg = x + g * l.kg;
    __m512 scale[NP], zs[NP];  // the weights' scale, and zero * scale
    for (int p = 0; p < NP; ++p) {
      scale[p] = load_f16_pair(w[2 * p] + off, w[2 * p + 1] + off);
      zs[p] = _mm512_mul_ps(load_f16_pair(w[2 * p] + off + 16, w[2 * p + 1] + off + 16), scale[p]);
    }
    off += 32;
    __m512i acc[kChains<R, NP>][R][NP];
    for (auto& a : acc) {
      for (int r = 0; r < R; ++r) {
        for (int p = 0; p < NP; ++p) a[r][p] = _mm512_setzero_si512();
      }
    }
    for (int64_t o = 0; o < rows8; ++o) {
      __m512i lo[NP], hi[NP];  // k 0..3 and 4..7 of each column
      for (int p = 0; p < NP; ++p) {
        const size_t pos = size_t(off + o * 32);
        for (int i = 2 * p; i < 2 * p + 2 && prefetch; ++i)
          _mm_prefetch(ahead_of(w[i], pos, ahead, R <= kQMaxRows, 2 * NP, l.block_bytes),
                       _MM_HINT_T0);
        const __m512i raw = load_pair(w[2 * p], w[2 * p + 1], off + o * 32);
        lo[p] = _mm512_and_si512(raw, low4);
        hi[p] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      }
      // Every row's low k, then every row's high k: a row's two multiply-adds of this step do
      // not meet back to back (the integer sums are exact, so the order changes no bit). Row by
      // row, GCC's code moved each accumulator through another register twice a step (16 copies
      // beside 16 vpdpbusd in an 8-row tile); in this order once. Measured on an Intel Xeon
      // (family 6 model 207), alternating in one process: one 8-row tile over L1, one thread,
      // medians of 40 rounds, 387 -> 404 G ops/s (g64), 309 -> 322 (g32), 250 -> 277 (g128);
      // qgemm on 2 threads, best of 60 / 30 calls, M = 16 and 64: 2-10% faster on the four
      // Qwen3-0.6B shapes.
      for (int r = 0; r < R; ++r) {
        const __m512i bx0 = broadcast32(xg + r * t.ldx + 8 * o);
        for (int p = 0; p < NP; ++p) acc[0][r][p] = _mm512_dpbusd_epi32(acc[0][r][p], lo[p], bx0);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i bx1 = broadcast32(xg + r * t.ldx + 8 * o + 4);
        for (int p = 0; p < NP; ++p)
          acc[kChains<R, NP> - 1][r][p] =
              _mm512_dpbusd_epi32(acc[kChains<R, NP> - 1][r][p], hi[p], bx1);
      }
    }
    off += rows8 * 32;
    for (int r = 0; r < R; ++r) {
      const __m512 xs = _mm512_set1_ps(t.xscale[r * l.groups + g]);
      const __m512 xsum = _mm512_set1_ps(t.xsum[r * l.groups + g]);
      for (int p = 0; p < NP; ++p) {
        const __m512 s = _mm512_maskz_cvtepi32_ps(kAll16, chain_sum(acc, r, p));
        accf[r][p] = _mm512_fmadd_ps(s, _mm512_mul_ps(scale[p], xs), accf[r][p]);
        accf[r][p] = _mm512_fnmadd_ps(zs[p], xsum, accf[r][p]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < NP; ++p) {
      const int n = t.ncols - p * 16;
      if (n <= 0) break;
      store16(t.out + r * t.ldo + p * 16, accf[r][p], t.bias ? t.bias + p * 16 : nullptr, n);
    }
  }
}

// Tall tiles (qgemm.h, kQMaxRowsTall): R = kQMaxRowsVnni + 1 .. kQMaxRowsTall rows of one pair
// of blocks (16 columns) over interleaved x, each loaded and widened (int8) or unpacked (int4)
// weight row meeting every row of the batch. The R integer sums take R registers, so the f32
// sums live in part[R][16], one line a row: each group's flush reads a row's sum so far (0 for
// the first group, as the 8-row tiles' registers start), adds the group's in the same f32 steps
// as qtile8 / qtile4, and stores it back; the same operations in the same order, the same bits.
inline __m512 load_part(const float* p, bool first) {
  return first ? _mm512_setzero_ps() : _mm512_load_ps(p);
}

template <int R, bool GROUPED>
void qtile8_tall(const QTile& t) {
  const uint8_t* x = static_cast<const uint8_t*>(t.x);  // [kpad / 2][R][2] int16
  const QuantLayout& l = *t.layout;
  const uint8_t* w[2];
  block_pairs<1>(t, w);
  alignas(64) float part[R][16];  // the f32 sums so far, a row a line
  [[maybe_unused]] __m512 wscale;
  int64_t off = 0;
  if constexpr (!GROUPED) {
    wscale = load_f32_pair(w[0], w[1]);
    off = 32;
  }
  const size_t ahead = prefetch_ahead(false, 2, l.block_bytes);
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t pairs = l.group_len(g) / 2;
    const uint8_t* xg = x + g * l.kg / 2 * R * 4;
    [[maybe_unused]] __m512 scale;
    if constexpr (GROUPED) {
      scale = load_f32_pair(w[0] + off, w[1] + off);
      off += 32;
    }
    __m512i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
    for (int64_t pr = 0; pr < pairs; pr += 2) {
      const int64_t o = off + pr * 16;
      for (int i = 0; i < 2; ++i)
        _mm_prefetch(ahead_of(w[i], size_t(o), ahead, false, 2, l.block_bytes), _MM_HINT_T0);
      const __m512i raw = load_pair(w[0], w[1], o);
      const __m512i q0 = _mm512_srai_epi16(_mm512_slli_epi16(raw, 8), 8);
      const __m512i q1 = _mm512_srai_epi16(raw, 8);
      const uint8_t* xp = xg + pr * R * 4;
      for (int r = 0; r < R; ++r) acc[r] = _mm512_dpwssd_epi32(acc[r], q0, broadcast32(xp + 4 * r));
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_dpwssd_epi32(acc[r], q1, broadcast32(xp + 4 * (R + r)));
    }
    off += pairs * 16;
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_maskz_cvtepi32_ps(kAll16, acc[r]);
      const __m512 prev = load_part(part[r], g == 0);
      _mm512_store_ps(part[r], GROUPED ? _mm512_fmadd_ps(s, scale, prev) : _mm512_add_ps(prev, s));
    }
  }
  for (int r = 0; r < R; ++r) {
    __m512 v = _mm512_mul_ps(_mm512_load_ps(part[r]), _mm512_set1_ps(t.xscale[r]));
    if constexpr (!GROUPED) v = _mm512_mul_ps(v, wscale);
    store16(t.out + r * t.ldo, v, t.bias, t.ncols);
  }
}

template <int R>
void qtile4_tall(const QTile& t) {
  const QuantLayout& l = *t.layout;
  const uint8_t* x = static_cast<const uint8_t*>(t.x);  // [kpad / 4][R][4] int8
  const uint8_t* w[2];
  block_pairs<1>(t, w);
  alignas(64) float part[R][16];  // the f32 sums so far, a row a line
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const size_t ahead = prefetch_ahead(false, 2, l.block_bytes);
  int64_t off = 0;
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t rows8 = l.group_len(g) / 8;
    const uint8_t* xg = x + g * l.kg / 4 * R * 4;
    const __m512 scale = load_f16_pair(w[0] + off, w[1] + off);
    const __m512 zs = _mm512_mul_ps(load_f16_pair(w[0] + off + 16, w[1] + off + 16), scale);
    off += 32;
    __m512i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
    for (int64_t o = 0; o < rows8; ++o) {
      const size_t pos = size_t(off + o * 32);
      for (int i = 0; i < 2; ++i)
        _mm_prefetch(ahead_of(w[i], pos, ahead, false, 2, l.block_bytes), _MM_HINT_T0);
      const __m512i raw = load_pair(w[0], w[1], off + o * 32);
      const __m512i lo = _mm512_and_si512(raw, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      const uint8_t* xp = xg + o * 2 * R * 4;
      for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbusd_epi32(acc[r], lo, broadcast32(xp + 4 * r));
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_dpbusd_epi32(acc[r], hi, broadcast32(xp + 4 * (R + r)));
    }
    off += rows8 * 32;
    for (int r = 0; r < R; ++r) {
      const __m512 xs = _mm512_set1_ps(t.xscale[r * l.groups + g]);
      const __m512 xsum = _mm512_set1_ps(t.xsum[r * l.groups + g]);
      const __m512 s = _mm512_maskz_cvtepi32_ps(kAll16, acc[r]);
      __m512 v = _mm512_fmadd_ps(s, _mm512_mul_ps(scale, xs), load_part(part[r], g == 0));
      _mm512_store_ps(part[r], _mm512_fnmadd_ps(zs, xsum, v));
    }
  }
  for (int r = 0; r < R; ++r) store16(t.out + r * t.ldo, _mm512_load_ps(part[r]), t.bias, t.ncols);
}

#pragma GCC pop_options

template <int NP, size_t... I>
constexpr std::array<QTileFn, sizeof...(I)> table8(std::index_sequence<I...>, bool grouped) {
  return grouped ? std::array<QTileFn, sizeof...(I)>{&qtile8<int(I) + 1, NP, true>...}
                 : std::array<QTileFn, sizeof...(I)>{&qtile8<int(I) + 1, NP, false>...};
}

template <int NP, size_t... I>
constexpr std::array<QTileFn, sizeof...(I)> table4(std::index_sequence<I...>) {
  return {&qtile4<int(I) + 1, NP>...};
}

template <size_t... I>
constexpr std::array<QTileFn, sizeof...(I)> table8_tall(std::index_sequence<I...>, bool grouped) {
  return grouped
             ? std::array<QTileFn, sizeof...(I)>{&qtile8_tall<kQMaxRowsVnni + 1 + int(I), true>...}
             : std::array<QTileFn, sizeof...(I)>{
                   &qtile8_tall<kQMaxRowsVnni + 1 + int(I), false>...};
}

template <size_t... I>
constexpr std::array<QTileFn, sizeof...(I)> table4_tall(std::index_sequence<I...>) {
  return {&qtile4_tall<kQMaxRowsVnni + 1 + int(I)>...};
}

// Tiles of one pair (2 blocks) for 1..kQMaxRowsVnni rows, of two pairs for 1..kQMaxRows.
constexpr auto kRows = std::make_index_sequence<kQMaxRows>();
constexpr auto kRowsWide = std::make_index_sequence<kQMaxRowsVnni>();
constexpr auto kInt8RowOnePair = table8<1>(kRowsWide, false);
constexpr auto kInt8RowTwoPairs = table8<2>(kRows, false);
constexpr auto kInt8GroupOnePair = table8<1>(kRowsWide, true);
constexpr auto kInt8GroupTwoPairs = table8<2>(kRows, true);
constexpr auto kInt4OnePair = table4<1>(kRowsWide);
constexpr auto kInt4TwoPairs = table4<2>(kRows);
constexpr auto kRowsTall = std::make_index_sequence<kQMaxRowsTall - kQMaxRowsVnni>();
constexpr auto kInt8RowTall = table8_tall(kRowsTall, false);
constexpr auto kInt8GroupTall = table8_tall(kRowsTall, true);
constexpr auto kInt4Tall = table4_tall(kRowsTall);

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
void interleave_x_rows(uint8_t* dst, const uint8_t* src, int64_t row_bytes, int rows, int64_t c0,
                       int64_t c1) {
  if (rows == 16) {  // a column of 16 rows: one gather, one store
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(int(row_bytes / 4)));
    for (int64_t c = c0; c < c1; ++c)
      _mm512_store_si512(
          reinterpret_cast<void*>(dst + c * 64),
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), kAll16, idx,
                                      reinterpret_cast<const void*>(src + 4 * c), 4));
    return;
  }
  for (int64_t c = c0; c < c1; ++c)
    for (int r = 0; r < rows; ++r)
      std::memcpy(dst + (c * rows + r) * 4, src + r * row_bytes + 4 * c, 4);
}
#pragma GCC pop_options

QTileFn avx512_qtile(QuantScheme scheme, int rows, int blocks) {
  const bool one_pair = blocks <= 2;
  NV_CHECK(rows >= 1 && rows <= (one_pair ? kQMaxRowsTall : kQMaxRows) && blocks >= 1 &&
               blocks <= kQMaxBlocks,
           "qtile {} x {}", rows, blocks);
  if (rows > kQMaxRowsVnni) {
    const size_t r = size_t(rows - kQMaxRowsVnni - 1);
    if (scheme.format == QuantFormat::Int4) return kInt4Tall[r];
    return scheme.group ? kInt8GroupTall[r] : kInt8RowTall[r];
  }
  const size_t r = size_t(rows - 1);
  if (scheme.format == QuantFormat::Int4) return one_pair ? kInt4OnePair[r] : kInt4TwoPairs[r];
  if (scheme.group) return one_pair ? kInt8GroupOnePair[r] : kInt8GroupTwoPairs[r];
  return one_pair ? kInt8RowOnePair[r] : kInt8RowTwoPairs[r];
}

}  // namespace nanovllm::cpu::detail
