// AVX2+FMA GEMM kernels on the same packed weight layout: each 64-byte k-pair row of a block
// is widened to f32 with shifts (even k: the low half << 16; odd k: the high half masked) and
// multiplied with x (bf16-rounded, kept as f32 pairs) by two FMAs.
#include <immintrin.h>

#include "backend/cpu/gemm_internal.h"
#include "runtime/tensor.h"

namespace nanovllm::cpu::detail {
namespace {

constexpr int kMr = 4;  // 4 rows x 16 columns = 8 ymm accumulators + 4 widened weights + 2 x
constexpr int kNb = 1;
constexpr int kPrefetchBytes = 1024;

// x rows -> bf16-rounded f32 pairs in the [kpairs][mr][2] panel layout (scalar: this path is
// the fallback, and packing is a small part of a GEMM).
void pack_x(void* dst, const float* x, int64_t ldx, int64_t m, int64_t k, int64_t mr,
            int64_t panel_begin, int64_t panel_end) {
  const int64_t kpairs = (k + 1) / 2;
  float* out = static_cast<float*>(dst);
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    float* pan = out + panel * kpairs * mr * 2;
    for (int64_t r = 0; r < mr; ++r) {
      const int64_t row = panel * mr + r;
      for (int64_t i = 0; i < kpairs * 2; ++i) {
        float v = 0.0f;
        if (row < m && i < k) v = bf16_to_f32(f32_to_bf16(x[row * ldx + i]));
        pan[((i / 2) * mr + r) * 2 + (i & 1)] = v;
      }
    }
  }
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")

template <int R, bool PF>
void tile_kernel(const Tile& t) {
  const __m256i hi = _mm256_set1_epi32(int(0xffff0000u));
  const uint8_t* w = t.w;
  const float* x = static_cast<const float*>(t.x);
  const int64_t xs2 = t.xs * 2;
  // One summation chunk at a time (gemm_internal.h): the chain restarts at zero per chunk.
  for (int64_t c0 = 0; c0 < t.kpairs; c0 += kSumChunkPairs) {
    const int64_t c1 = t.kpairs - c0 < kSumChunkPairs ? t.kpairs : c0 + kSumChunkPairs;
    const bool first = t.first && c0 == 0;
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t p = c0; p < c1; ++p) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32));
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(w + kPrefetchBytes), _MM_HINT_T0);
      const __m256 we0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
      const __m256 wo0 = _mm256_castsi256_ps(_mm256_and_si256(w0, hi));
      const __m256 we1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
      const __m256 wo1 = _mm256_castsi256_ps(_mm256_and_si256(w1, hi));
      for (int r = 0; r < R; ++r) {
        const __m256 xe = _mm256_broadcast_ss(x + 2 * r);
        const __m256 xo = _mm256_broadcast_ss(x + 2 * r + 1);
        acc[r][0] = _mm256_fmadd_ps(we0, xe, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(we1, xe, acc[r][1]);
        acc[r][0] = _mm256_fmadd_ps(wo0, xo, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(wo1, xo, acc[r][1]);
      }
      w += kBlockPairBytes;
      x += xs2;
    }

    for (int r = 0; r < R; ++r) {
      float* o = t.out + r * t.ldo;
      if (t.ncols == 16) {
        __m256 b0, b1;
        if (!first) {
          b0 = _mm256_loadu_ps(o);
          b1 = _mm256_loadu_ps(o + 8);
        } else if (t.bias) {
          const __m128i bb0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t.bias));
          const __m128i bb1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t.bias + 8));
          b0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bb0), 16));
          b1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bb1), 16));
        } else {
          b0 = b1 = _mm256_setzero_ps();
        }
        _mm256_storeu_ps(o, _mm256_add_ps(b0, acc[r][0]));
        _mm256_storeu_ps(o + 8, _mm256_add_ps(b1, acc[r][1]));
      } else {
        alignas(32) float tmp[16];
        _mm256_store_ps(tmp, acc[r][0]);
        _mm256_store_ps(tmp + 8, acc[r][1]);
        for (int c = 0; c < t.ncols; ++c) {
          float base = first ? (t.bias ? bf16_to_f32(t.bias[c]) : 0.0f) : o[c];
          o[c] = base + tmp[c];
        }
      }
    }
  }
}

using TileFn = void (*)(const Tile&);

template <bool PF>
TileFn pick(int rows) {
  switch (rows) {
    case 1:
      return tile_kernel<1, PF>;
    case 2:
      return tile_kernel<2, PF>;
    case 3:
      return tile_kernel<3, PF>;
    default:
      return tile_kernel<4, PF>;
  }
}

void tile(const Tile& t) {
  TileFn fn = t.prefetch ? pick<true>(t.rows) : pick<false>(t.rows);
  fn(t);
}

#pragma GCC pop_options

}  // namespace

const KernelSet& avx2_kernels() {
  static const KernelSet set{kMr, kNb, 8, pack_x, tile, 0, nullptr, nullptr};
  return set;
}

}  // namespace nanovllm::cpu::detail
