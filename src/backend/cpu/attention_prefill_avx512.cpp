// The f32 prefill kernel (attention_prefill.cpp) on 16-row zmm vectors where the CPU has AVX-512:
// attention_prefill_kernel.inc with matmul blocks of 48 rows x 8 keys (or head_dim elements)
// instead of ymm's 16 x 6, and the softmax and the bf16 rows' widening 16 lanes at a time, with the
// ymm kernel's bits. Per FMA the matmuls load and broadcast under half as much: on a Zen 4, whose
// zmm FMA rate equals its ymm one, that is the gain; where zmm FMAs issue on two ports (Intel
// Xeons) the peak doubles too.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "backend/cpu/attention_common.h"
#include "backend/cpu/vec_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
// GCC 12 flags the _mm512_undefined_* pass-through inside unmasked intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace nanovllm::cpu::attention_detail {

namespace {

// The kernel on 16-row zmm vectors, matmul blocks of 3 vectors (48 rows: 3 loads and 8 broadcasts
// per 24 FMAs, 24 of the 32 registers as sums) x 8 keys or head_dim elements.
struct Zmm {
  using T = __m512;
  using M = __mmask16;
  static constexpr int kLanes = 16, kBlock = 8, kRowVecs = 3;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(const float* p) { return _mm512_set1_ps(*p); }
  static T splat(float x) { return _mm512_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T exp(T x) { return vec::exp16(x); }
  static M valid(float key, T lo, T lim) {
    const T k = _mm512_set1_ps(key);
    return _mm512_cmp_ps_mask(k, lim, _CMP_LT_OQ) & _mm512_cmp_ps_mask(k, lo, _CMP_GE_OQ);
  }
  static T select(M m, T s) { return _mm512_mask_blend_ps(m, _mm512_set1_ps(kNegInf), s); }
  static T keep(M m, T p) { return _mm512_maskz_mov_ps(m, p); }
  static void widen_bf16(float* dst, const uint16_t* src, int64_t d) {  // d % 8 == 0
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      _mm512_storeu_ps(dst + i,
                       _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    if (i < d) bf16_row_to_f32(dst + i, src + i, d - i);
  }
};

#include "backend/cpu/attention_prefill_kernel.inc"

void run_item_zmm(const AttnArgs& a, const PrefillItem& it, PrefillScratch& sc) {
  run_item<Zmm>(a, it, sc);
}

}  // namespace

}  // namespace nanovllm::cpu::attention_detail

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace nanovllm::cpu::attention_detail {

// Outside the AVX-512 target: declared (attention_common.h) for the AVX2 kernel's callers.
void run_prefill_item_avx512(const AttnArgs& a, const PrefillItem& it, PrefillScratch& sc) {
  run_item_zmm(a, it, sc);
}

}  // namespace nanovllm::cpu::attention_detail
