// AVX2 tiles of the quantized GEMM (qgemm.h).
// int8 weights: per step, each block's codes are widened to int16 in place (shifts of 16-bit
// lanes, no lane-crossing shuffles) and meet every row of the tile through vpmaddwd against the
// row's broadcast pair of int16 x codes: 8 int32 sums of 2 products per instruction; each group
// ends in f32 (grouped: scale * sum; per row: the sum, its scale at the end).
// int4 weights: per 8 k, a mask and a shift give each block's 4-bit codes as bytes, which
// vpmaddubsw multiplies by the row's broadcast 4 int8 x codes: 16 int16 sums of 2 products per
// instruction, accumulated in int16 over up to 32 k, then widened by vpmaddwd with ones into the
// group's int32 sums; each group ends in f32 as sum * scale * x scale - zero * scale * (the x
// scale times its code sum). The AVX-512 VNNI tiles (qgemm_avx512.cpp) flush the same sums the
// same way: both paths give the same bits.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "backend/cpu/qgemm.h"
#include "runtime/tensor.h"

namespace nanovllm::cpu::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

inline __m256i broadcast_pair(const int16_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm256_set1_epi32(v);
}

// out[0, n) = v (+ bias), n <= 8.
inline void store(float* out, __m256 v, const uint16_t* bias, int n) {
  if (n == 8) {
    if (bias) {
      const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bias)));
      v = _mm256_add_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)));
    }
    _mm256_storeu_ps(out, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int i = 0; i < n; ++i) out[i] = tmp[i] + (bias ? bf16_to_f32(bias[i]) : 0.0f);
}

// int8 codes, with a scale per group (GROUPED) or per row; x int16.
template <int R, int NB, bool GROUPED>
void qtile(const QTile& t) {
  const int16_t* x = static_cast<const int16_t*>(t.x);
  const QuantLayout& l = *t.layout;
  const uint8_t* w[NB];
  for (int b = 0; b < NB; ++b) w[b] = t.w + size_t(b) * l.block_bytes;
  __m256 accf[R][NB];
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < NB; ++b) accf[r][b] = _mm256_setzero_ps();
  }
  [[maybe_unused]] __m256 wscale[NB];
  if constexpr (!GROUPED) {
    for (int b = 0; b < NB; ++b) {
      wscale[b] = _mm256_load_ps(reinterpret_cast<const float*>(w[b]));
      w[b] += 32;
    }
  }
  const size_t ahead = size_t(kTilesAhead) * NB * l.block_bytes;
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t pairs = l.group_len(g) / 2;
    const int16_t* xg = x + g * l.kg;
    [[maybe_unused]] __m256 scale[NB];
    if constexpr (GROUPED) {
      for (int b = 0; b < NB; ++b) {
        scale[b] = _mm256_load_ps(reinterpret_cast<const float*>(w[b]));
        w[b] += 32;
      }
    }
    __m256i acc[R][NB];
    for (int r = 0; r < R; ++r) {
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_setzero_si256();
    }
    for (int64_t p = 0; p < pairs; p += 2) {
      for (int b = 0; b < NB; ++b) {
        _mm_prefetch(reinterpret_cast<const char*>(w[b] + p * 16 + ahead), _MM_HINT_T0);
        const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[b] + p * 16));
        const __m256i q0 = _mm256_srai_epi16(_mm256_slli_epi16(raw, 8), 8);
        const __m256i q1 = _mm256_srai_epi16(raw, 8);
        for (int r = 0; r < R; ++r) {
          const int16_t* xp = xg + r * t.ldx + 2 * p;
          acc[r][b] = _mm256_add_epi32(acc[r][b], _mm256_add_epi32(_mm256_madd_epi16(q0, broadcast_pair(xp)),
                                                                   _mm256_madd_epi16(q1, broadcast_pair(xp + 2))));
        }
      }
    }
    for (int b = 0; b < NB; ++b) w[b] += pairs * 16;
    for (int r = 0; r < R; ++r) {
      for (int b = 0; b < NB; ++b) {
        const __m256 s = _mm256_cvtepi32_ps(acc[r][b]);
        if constexpr (GROUPED) {
          accf[r][b] = _mm256_fmadd_ps(s, scale[b], accf[r][b]);
        } else {
          accf[r][b] = _mm256_add_ps(accf[r][b], s);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 xs = _mm256_set1_ps(t.xscale[r]);
    for (int b = 0; b < NB; ++b) {
      const int n = t.ncols - b * 8;
      if (n <= 0) break;
      __m256 v = _mm256_mul_ps(accf[r][b], xs);
      if constexpr (!GROUPED) v = _mm256_mul_ps(v, wscale[b]);
      store(t.out + r * t.ldo + b * 8, v, t.bias ? t.bias + b * 8 : nullptr, n < 8 ? n : 8);
    }
  }
}

// int4 codes with a scale and zero per group; x int8 with a scale per group.
template <int R, int NB>
void qtile_i4(const QTile& t) {
  const QuantLayout& l = *t.layout;
  const int8_t* x = static_cast<const int8_t*>(t.x);
  const uint8_t* w[NB];
  for (int b = 0; b < NB; ++b) w[b] = t.w + size_t(b) * l.block_bytes;
  __m256 accf[R][NB];
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < NB; ++b) accf[r][b] = _mm256_setzero_ps();
  }
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t ahead = size_t(kTilesAhead) * NB * l.block_bytes;
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t rows8 = l.group_len(g) / 8;  // 32-byte rows of 8 k
    const int8_t* xg = x + g * l.kg;
    __m256 scale[NB], zs[NB];  // the weights' scale, and zero * scale
    for (int b = 0; b < NB; ++b) {
      scale[b] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(w[b])));
      zs[b] = _mm256_mul_ps(
          _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(w[b] + 16))), scale[b]);
      w[b] += 32;
    }
    __m256i sum[R][NB];  // the group's exact sums, int32
    for (int r = 0; r < R; ++r) {
      for (int b = 0; b < NB; ++b) sum[r][b] = _mm256_setzero_si256();
    }
    // Windows of 4 rows (32 k): each int16 lane sums 16 products of at most 15 * 127.
    for (int64_t o0 = 0; o0 < rows8; o0 += 4) {
      const int64_t o1 = o0 + 4 < rows8 ? o0 + 4 : rows8;
      __m256i acc[R][NB];
      for (int r = 0; r < R; ++r) {
        for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_setzero_si256();
      }
      for (int64_t o = o0; o < o1; ++o) {
        __m256i lo[NB], hi[NB];  // k 0..3 and 4..7 of each column
        for (int b = 0; b < NB; ++b) {
          _mm_prefetch(reinterpret_cast<const char*>(w[b] + o * 32 + ahead), _MM_HINT_T0);
          const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[b] + o * 32));
          lo[b] = _mm256_and_si256(raw, low4);
          hi[b] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        }
        for (int r = 0; r < R; ++r) {  // each row's 8 x codes meet every block
          const int8_t* xp = xg + r * t.ldx + 8 * o;
          int32_t x0, x1;
          std::memcpy(&x0, xp, 4);
          std::memcpy(&x1, xp + 4, 4);
          const __m256i bx0 = _mm256_set1_epi32(x0), bx1 = _mm256_set1_epi32(x1);
          for (int b = 0; b < NB; ++b) {
            acc[r][b] = _mm256_add_epi16(
                acc[r][b], _mm256_add_epi16(_mm256_maddubs_epi16(lo[b], bx0),
                                            _mm256_maddubs_epi16(hi[b], bx1)));
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        for (int b = 0; b < NB; ++b)
          sum[r][b] = _mm256_add_epi32(sum[r][b], _mm256_madd_epi16(acc[r][b], ones));
      }
    }
    for (int b = 0; b < NB; ++b) w[b] += rows8 * 32;
    // + sum * scale * x scale - zero * scale * (x scale * sum of x codes)
    for (int r = 0; r < R; ++r) {
      const __m256 xs = _mm256_set1_ps(t.xscale[r * l.groups + g]);
      const __m256 xsum = _mm256_set1_ps(t.xsum[r * l.groups + g]);
      for (int b = 0; b < NB; ++b) {
        const __m256 s = _mm256_cvtepi32_ps(sum[r][b]);
        accf[r][b] = _mm256_fmadd_ps(s, _mm256_mul_ps(scale[b], xs), accf[r][b]);
        accf[r][b] = _mm256_fnmadd_ps(zs[b], xsum, accf[r][b]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < NB; ++b) {
      const int n = t.ncols - b * 8;
      if (n <= 0) break;
      store(t.out + r * t.ldo + b * 8, accf[r][b], t.bias ? t.bias + b * 8 : nullptr,
            n < 8 ? n : 8);
    }
  }
}

// ---- x quantization (qgemm.h), one row ----

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// max |x[i0, i1)|; *bad set when a value is not finite.
inline float abs_max(const float* x, int64_t i0, int64_t i1, bool* bad) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 m = _mm256_setzero_ps(), nonfinite = _mm256_setzero_ps();
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    nonfinite = _mm256_or_ps(nonfinite, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // NaN or inf
    m = _mm256_max_ps(m, a);
  }
  float r = hmax(m);
  if (_mm256_movemask_ps(nonfinite)) *bad = true;
  for (; i < i1; ++i) {
    if (!std::isfinite(x[i])) *bad = true;
    r = std::max(r, std::fabs(x[i]));
  }
  return r;
}

// Round to nearest even, as std::nearbyint in the default rounding mode.
inline int32_t round_code(float v) { return _mm_cvtss_si32(_mm_set_ss(v)); }

#pragma GCC pop_options

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

void quantize_x_i16(const float* x, int64_t k, const QuantLayout& l, int16_t* q, float* xscale) {
  bool bad = false;
  const float amax = abs_max(x, 0, k, &bad);
  std::memset(q, 0, size_t(l.kpad) * 2);
  if (bad) {
    *xscale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float s = amax / 16383.0f;
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
  }
  for (; i < k; ++i) q[i] = int16_t(round_code(x[i] * inv));
  *xscale = s;
}

void quantize_x_i8(const float* x, int64_t k, const QuantLayout& l, int8_t* q, float* xscale,
                   float* xsum) {
  std::memset(q, 0, size_t(l.kpad));
  bool bad = false;
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t i0 = g * l.kg, i1 = std::min(k, i0 + l.group_len(g));
    xscale[g] = i0 < k ? abs_max(x, i0, i1, &bad) : 0.0f;  // the group's max|x| for now
  }
  if (bad) {
    std::fill_n(xscale, l.groups, std::numeric_limits<float>::quiet_NaN());
    std::fill_n(xsum, l.groups, 0.0f);
    return;
  }
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t i0 = g * l.kg, i1 = std::min(k, i0 + l.group_len(g));
    const float s = xscale[g] / 127.0f;
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i vsum = _mm256_setzero_si256();
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
      vsum = _mm256_add_epi32(vsum, v);
      const __m128i w16 =
          _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(w16, w16));
    }
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), vsum);
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) sum += lanes[j];
    for (; i < i1; ++i) {
      q[i] = int8_t(round_code(x[i] * inv));
      sum += q[i];
    }
    xscale[g] = s;
    xsum[g] = s * float(sum);
  }
}

#pragma GCC pop_options

namespace {

template <bool GROUPED, size_t... I>
constexpr std::array<QTileFn, sizeof...(I)> table(std::index_sequence<I...>) {
  return {&qtile<int(I / kQMaxBlocks) + 1, int(I % kQMaxBlocks) + 1, GROUPED>...};
}

template <size_t... I>
constexpr std::array<QTileFn, sizeof...(I)> table_i4(std::index_sequence<I...>) {
  return {&qtile_i4<int(I / kQMaxBlocks) + 1, int(I % kQMaxBlocks) + 1>...};
}

constexpr auto kTiles = std::make_index_sequence<kQMaxRows * kQMaxBlocks>();
constexpr auto kInt8RowTiles = table<false>(kTiles);
constexpr auto kInt8GroupTiles = table<true>(kTiles);
constexpr auto kInt4Tiles = table_i4(kTiles);

}  // namespace

QTileFn avx2_qtile(QuantScheme scheme, int rows, int blocks) {
  NV_CHECK(rows >= 1 && rows <= kQMaxRows && blocks >= 1 && blocks <= kQMaxBlocks,
           "qtile {} x {}", rows, blocks);
  const auto& t = scheme.format == QuantFormat::Int4 ? kInt4Tiles
                  : scheme.group                     ? kInt8GroupTiles
                                                     : kInt8RowTiles;
  return t[size_t((rows - 1) * kQMaxBlocks + blocks - 1)];
}

}  // namespace nanovllm::cpu::detail
