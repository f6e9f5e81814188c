// The f32 prefill kernel's two matmuls (attention_prefill.cpp) on 16-row zmm vectors where the
// CPU has AVX-512: the blocks of attention_prefill_blocks.inc, 32 rows x 8 keys (or head_dim
// elements) instead of ymm's 16 x 6, with the ymm kernel's bits. Per FMA they load and broadcast
// half as much: on a Zen 4, whose zmm FMA rate equals its ymm one, that is the gain; where zmm
// FMAs issue on two ports (Intel Xeons) the peak doubles too.
#include <immintrin.h>

#include <type_traits>

#include "backend/cpu/attention_common.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

namespace nanovllm::cpu::attention_detail {

namespace {

// The matmul blocks (attention_prefill_blocks.inc) on 16-row zmm vectors, 8 keys or head_dim
// elements a block.
struct Zmm {
  using T = __m512;
  static constexpr int kLanes = 16, kBlock = 8;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(const float* p) { return _mm512_set1_ps(*p); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
};

#include "backend/cpu/attention_prefill_blocks.inc"

void qk_zmm(const float* qt, int64_t rp, const float* kf, int64_t n, int64_t d, float* st) {
  qk_all<Zmm>(qt, rp, kf, n, d, st);
}

void pv_zmm(float* ot, int64_t rp, const float* corr, const float* pt, const float* vf, int64_t n,
            int64_t d) {
  pv_all<Zmm>(ot, rp, corr, pt, vf, n, d);
}

}  // namespace

}  // namespace nanovllm::cpu::attention_detail

#pragma GCC pop_options

namespace nanovllm::cpu::attention_detail {

// Outside the AVX-512 target: declared (attention_common.h) for the AVX2 kernel's callers.
void qk_rows_avx512(const float* qt, int64_t rp, const float* kf, int64_t n, int64_t d, float* st) {
  qk_zmm(qt, rp, kf, n, d, st);
}

void pv_rows_avx512(float* ot, int64_t rp, const float* corr, const float* pt, const float* vf,
                    int64_t n, int64_t d) {
  pv_zmm(ot, rp, corr, pt, vf, n, d);
}

}  // namespace nanovllm::cpu::attention_detail
