// AVX2 tiles of the quantized GEMM (qgemm.h; their code is qgemm_tiles_ymm.inc, shared with
// the AVX-VNNI tiles of qgemm_avxvnni.cpp), and the x quantization of every tile set.
// int8 weights: per step, each block's codes are widened to int16 in place (shifts of 16-bit
// lanes, no lane-crossing shuffles) and meet every row of the tile through vpmaddwd against the
// row's broadcast pair of int16 x codes: 8 int32 sums of 2 products per instruction; each group
// ends in f32 (grouped: scale * sum; per row: the sum, its scale at the end).
// int4 weights: per 8 k, a mask and a shift give each block's 4-bit codes as bytes, which
// vpmaddubsw multiplies by the row's broadcast 4 int8 x codes: 16 int16 sums of 2 products per
// instruction, accumulated in int16 over up to 32 k, then widened by vpmaddwd with ones into the
// group's int32 sums; each group ends in f32 as sum * scale * x scale - zero * scale * (the x
// scale times its code sum). The AVX-VNNI and AVX-512 VNNI tiles (qgemm_avxvnni.cpp,
// qgemm_avx512.cpp) flush the same sums the same way: every path gives the same bits.
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

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
constexpr bool kAvxVnni = false;
#include "backend/cpu/qgemm_tiles_ymm.inc"
#pragma GCC pop_options

}  // namespace

QTileFn avx2_qtile(QuantScheme scheme, int rows, int blocks) {
  return ymm_qtile(scheme, rows, blocks);
}

}  // namespace nanovllm::cpu::detail
