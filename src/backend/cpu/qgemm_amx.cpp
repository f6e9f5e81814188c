// AMX INT8 tiles of the quantized GEMM (qgemm.h) for int8 weights, on the packed layout the
// other tiles read, bit for bit their results.
//
// The tiles multiply int8 by int8 where the other tiles multiply the weights by 15-bit x codes,
// so each code is split: x = 256 * hi + lo, hi = x >> 8 (signed, -64..63) and lo = x & 255
// (unsigned); tdpbssd sums hi * w, tdpbusd lo * w, and 256 * S_hi + S_lo is the exact int32
// sum of x * w that vpdpwssd / vpmaddwd compute (below 2^31: qgemm.h). Each group's sum is then
// flushed to f32 by the same operations in the same order as qgemm_avx512.cpp's qtile8.
//
// Layout: a packed block (8 columns) stores, per 4 k, 32 bytes with byte 4c + j holding column
// c's code of k0 + perm[j], perm = {0, 2, 1, 3} (qgemm.h), and the groups' codes follow each
// other (a grouped scale: a 32-byte header before each group). 16 of those rows, 64 k, are a B
// tile of 16 rows x 32 bytes at stride 32, as they lie. The x planes put the codes in the same
// order: byte 4q + j of a row holds the code of k 4q + perm[j], so the tile unit pairs them
// right; each 16 rows x 64 k of a plane is one contiguous A tile (qgemm.h). A register tile is 16
// rows x 16 columns (2 blocks): C tiles 0-3 (block 0's hi and lo sums, block 1's), A tiles 4 (hi)
// and 5 (lo), B tiles 6 and 7. From kAmxWideRows rows the wide tiles (amx_qtile8_wide) take 16
// rows x 32 columns (4 blocks): two blocks' rows copied side by side make a 16-column B tile
// (amx_pair_tiles), for which a tile instruction takes no longer than for 8 columns; C tiles 0-1
// hold columns 0-15's hi and lo sums, 2-3 columns 16-31's.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm.h"
#include "util/check.h"

namespace nanovllm::cpu::detail {
namespace {

constexpr int kRows = 16;                         // rows per tile
constexpr int64_t kStepK = 64;                    // k per tile step (an A tile row)
constexpr int64_t kStepBBytes = kStepK / 4 * 32;  // one B tile: 16 rows of 32 bytes

constexpr amx::TileConfig kConfig = {
    1, 0, {}, {32, 32, 32, 32, 64, 64, 32, 32}, {16, 16, 16, 16, 16, 16, 16, 16}};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")

// Block b's (hi, lo) tiles of one 64-k step from B at `b` (stride 32).
template <int B>
inline void step_block(const uint8_t* b) {
  amx::load<6 + B>(b, 32);
  amx::dp_ss<2 * B, 4, 6 + B>();
  amx::dp_us<2 * B + 1, 5, 6 + B>();
}

}  // namespace

int64_t amx_plane_k(const QuantLayout& l) { return (l.kpad + kStepK - 1) / kStepK * kStepK; }

bool amx_qgemm8_supports(const QuantLayout& l) {
  return l.scheme.format == QuantFormat::Int8 && (l.groups == 1 || l.kg % kStepK == 0);
}

void amx_x_planes(const int16_t* q, int64_t kpad, int64_t kp, int64_t row, uint8_t* planes) {
  // Lane i of 32 codes takes code (i & ~3) + {0, 2, 1, 3}[i & 3]: the blocks' order in 4 k.
  alignas(64) static constexpr int16_t kIdx[32] = {0,  2,  1,  3,  4,  6,  5,  7,  8,  10, 9,
                                                   11, 12, 14, 13, 15, 16, 18, 17, 19, 20, 22,
                                                   21, 23, 24, 26, 25, 27, 28, 30, 29, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  uint8_t* base = planes + (row / kRows) * kp * 2 * kRows + (row % kRows) * kStepK;
  for (int64_t k = 0; k < kp; k += 32) {
    const int64_t left = kpad - k;
    const __mmask32 mask = left >= 32 ? ~__mmask32(0) : left <= 0 ? 0 : (1u << left) - 1;
    const __m512i c = _mm512_permutexvar_epi16(idx, _mm512_maskz_loadu_epi16(mask, q + k));
    uint8_t* hi = base + (k / kStepK) * 2 * kRows * kStepK + k % kStepK;
    uint8_t* lo = hi + kRows * kStepK;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi),
                        _mm512_maskz_cvtepi16_epi8(~__mmask32(0), _mm512_srai_epi16(c, 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo),
                        _mm512_maskz_cvtepi16_epi8(~__mmask32(0), c));
  }
}

void amx_qtile8(const AmxQTile& t) {
  amx::use(kConfig, cpu_has_amx_int8);
  const QuantLayout& l = *t.layout;
  const bool grouped = l.scheme.group > 0;
  const int blocks = (t.ncols + 7) / 8;  // 1 or 2
  const uint8_t* w0 = t.w;
  const uint8_t* w1 = t.w + (blocks > 1 ? l.block_bytes : 0);  // a missing block reads block 0
  alignas(64) float accf[kRows][16] = {};
  alignas(64) int32_t sums[4][kRows][8];
  alignas(64) uint8_t tail[2][kStepBBytes];
  int64_t off = grouped ? 0 : 32;  // bytes into each block
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t len = l.group_len(g), k0 = g * l.kg;
    const float* scale0 = nullptr;
    const float* scale1 = nullptr;
    if (grouped) {
      scale0 = reinterpret_cast<const float*>(w0 + off);
      scale1 = reinterpret_cast<const float*>(w1 + off);
      off += 32;
    }
    amx::zero<0>();
    amx::zero<1>();
    amx::zero<2>();
    amx::zero<3>();
    for (int64_t s = 0; s < len; s += kStepK) {
      const uint8_t* a = t.x + (k0 + s) / kStepK * 2 * kRows * kStepK;
      amx::load<4>(a, kStepK);
      amx::load<5>(a + kRows * kStepK, kStepK);
      const uint8_t* b0 = w0 + off + s * 8;
      const uint8_t* b1 = w1 + off + s * 8;
      if (len - s < kStepK) {  // the last k: a whole tile would read past the group
        const size_t bytes = size_t(len - s) * 8;
        std::memset(tail, 0, sizeof tail);
        std::memcpy(tail[0], b0, bytes);
        std::memcpy(tail[1], b1, bytes);
        b0 = tail[0];
        b1 = tail[1];
      }
      step_block<0>(b0);
      step_block<1>(b1);
    }
    off += len * 8;
    amx::store<0>(sums[0], 32);
    amx::store<1>(sums[1], 32);
    amx::store<2>(sums[2], 32);
    amx::store<3>(sums[3], 32);
    for (int r = 0; r < t.rows; ++r) {
      for (int b = 0; b < 2; ++b) {
        const __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(sums[2 * b][r]));
        const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(sums[2 * b + 1][r]));
        const __m256 sum = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(hi, 8), lo));
        float* acc = accf[r] + 8 * b;
        if (grouped) {
          const __m256 sc = _mm256_loadu_ps(b ? scale1 : scale0);
          _mm256_store_ps(acc, _mm256_fmadd_ps(sum, sc, _mm256_load_ps(acc)));
        } else {
          _mm256_store_ps(acc, _mm256_add_ps(_mm256_load_ps(acc), sum));
        }
      }
    }
  }
  const __mmask16 cols = t.ncols >= 16 ? __mmask16(0xffff) : __mmask16((1u << t.ncols) - 1);
  __m512 wscale = _mm512_setzero_ps();
  if (!grouped) {
    wscale = _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm256_loadu_ps(reinterpret_cast<const float*>(w0))),
        _mm256_loadu_ps(reinterpret_cast<const float*>(w1)), 1);
  }
  __m512 bias = _mm512_setzero_ps();
  if (t.bias) {
    const __m512i b = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(cols, t.bias));
    bias = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, b, 16));
  }
  for (int r = 0; r < t.rows; ++r) {
    __m512 v = _mm512_mul_ps(_mm512_load_ps(accf[r]), _mm512_set1_ps(t.xscale[r]));
    if (!grouped) v = _mm512_mul_ps(v, wscale);
    if (t.bias) v = _mm512_add_ps(v, bias);
    _mm512_mask_storeu_ps(t.out + r * t.ldo, cols, v);
  }
}

// The wide tiles (amx_qtile8_wide): 16-column B tiles of 16 rows x 64 bytes, C tiles of 16 x 16.
constexpr amx::TileConfig kWideConfig = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

size_t amx_pair_tiles_bytes(const QuantLayout& l) {
  int64_t steps = 0;
  for (int64_t g = 0; g < l.groups; ++g) steps += (l.group_len(g) + kStepK - 1) / kStepK;
  return size_t(steps) * 1024;
}

void amx_pair_tiles(const QuantLayout& l, const uint8_t* w0, const uint8_t* w1, uint8_t* dst) {
  const bool grouped = l.scheme.group > 0;
  int64_t off = grouped ? 0 : 32;
  for (int64_t g = 0; g < l.groups; ++g) {
    if (grouped) off += 32;
    const int64_t len = l.group_len(g);
    for (int64_t s = 0; s < len; s += kStepK, dst += 1024) {
      const int64_t rows = (len - s) / 4 < 16 ? (len - s) / 4 : 16;  // kpad: a multiple of 8
      const uint8_t* r0 = w0 + off + s * 8;
      const uint8_t* r1 = w1 + off + s * 8;
      for (int64_t i = 0; i < 16; ++i) {
        __m256i v0 = _mm256_setzero_si256(), v1 = v0;
        if (i < rows) {
          v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + i * 32));
          v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + i * 32));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i * 64), v0);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i * 64 + 32), v1);
      }
    }
    off += len * 8;
  }
}

void amx_qtile8_wide(const AmxQTile& t) {
  amx::use(kWideConfig, cpu_has_amx_int8);
  const QuantLayout& l = *t.layout;
  const bool grouped = l.scheme.group > 0;
  const uint8_t* w[4];
  for (int b = 0; b < 4; ++b)
    w[b] = t.w + (8 * b < t.ncols ? b : 0) * l.block_bytes;  // a missing block reads block 0
  alignas(64) float accf[kRows][32] = {};
  alignas(64) int32_t sums[4][kRows][16];
  const uint8_t* b0 = t.b;
  const uint8_t* b1 = t.b + t.pair_bytes;
  int64_t off = grouped ? 0 : 32;  // bytes into each block (its group headers)
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t len = l.group_len(g), k0 = g * l.kg;
    const float* scale[4] = {};
    if (grouped) {
      for (int b = 0; b < 4; ++b) scale[b] = reinterpret_cast<const float*>(w[b] + off);
      off += 32;
    }
    off += len * 8;
    amx::zero<0>();
    amx::zero<1>();
    amx::zero<2>();
    amx::zero<3>();
    for (int64_t s = 0; s < len; s += kStepK, b0 += 1024, b1 += 1024) {
      const uint8_t* a = t.x + (k0 + s) / kStepK * 2 * kRows * kStepK;
      amx::load<4>(a, kStepK);
      amx::load<5>(a + kRows * kStepK, kStepK);
      amx::load<6>(b0, 64);
      amx::load<7>(b1, 64);
      amx::dp_ss<0, 4, 6>();
      amx::dp_us<1, 5, 6>();
      amx::dp_ss<2, 4, 7>();
      amx::dp_us<3, 5, 7>();
    }
    amx::store<0>(sums[0], 64);
    amx::store<1>(sums[1], 64);
    amx::store<2>(sums[2], 64);
    amx::store<3>(sums[3], 64);
    for (int p = 0; p < 2; ++p) {
      __m512 sc = _mm512_setzero_ps();
      if (grouped)
        sc = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(scale[2 * p])),
                                _mm256_loadu_ps(scale[2 * p + 1]), 1);
      for (int r = 0; r < t.rows; ++r) {
        const __m512i hi = _mm512_load_si512(sums[2 * p][r]);
        const __m512i lo = _mm512_load_si512(sums[2 * p + 1][r]);
        const __m512 sum = _mm512_maskz_cvtepi32_ps(
            0xffff, _mm512_add_epi32(_mm512_maskz_slli_epi32(0xffff, hi, 8), lo));
        float* acc = accf[r] + 16 * p;
        _mm512_store_ps(acc, grouped ? _mm512_fmadd_ps(sum, sc, _mm512_load_ps(acc))
                                     : _mm512_add_ps(_mm512_load_ps(acc), sum));
      }
    }
  }
  for (int p = 0; p < 2 && 16 * p < t.ncols; ++p) {
    const int cols = t.ncols - 16 * p;
    const __mmask16 mask = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
    __m512 wscale = _mm512_setzero_ps();
    if (!grouped) {
      wscale = _mm512_insertf32x8(
          _mm512_castps256_ps512(_mm256_loadu_ps(reinterpret_cast<const float*>(w[2 * p]))),
          _mm256_loadu_ps(reinterpret_cast<const float*>(w[2 * p + 1])), 1);
    }
    __m512 bias = _mm512_setzero_ps();
    if (t.bias) {
      const __m512i b =
          _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(mask, t.bias + 16 * p));
      bias = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, b, 16));
    }
    for (int r = 0; r < t.rows; ++r) {
      __m512 v = _mm512_mul_ps(_mm512_load_ps(accf[r] + 16 * p), _mm512_set1_ps(t.xscale[r]));
      if (!grouped) v = _mm512_mul_ps(v, wscale);
      if (t.bias) v = _mm512_add_ps(v, bias);
      _mm512_mask_storeu_ps(t.out + r * t.ldo + 16 * p, mask, v);
    }
  }
}

#pragma GCC pop_options

void amx_int8_peak_loop(int64_t iters) {
  amx::use(kWideConfig, cpu_has_amx_int8);
  alignas(64) static const uint8_t zeros[16 * 64] = {};  // the values do not matter
  amx::load<4>(zeros, 64);
  amx::load<5>(zeros, 64);
  amx::load<6>(zeros, 64);
  amx::load<7>(zeros, 64);
  for (int64_t i = 0; i < iters; ++i) {
    amx::dp_ss<0, 4, 6>();
    amx::dp_us<1, 5, 6>();
    amx::dp_ss<2, 4, 7>();
    amx::dp_us<3, 5, 7>();
  }
}

}  // namespace nanovllm::cpu::detail
