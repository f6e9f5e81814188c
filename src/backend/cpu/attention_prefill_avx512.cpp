// The f32 prefill kernel's two matmuls (attention_prefill.cpp) on 16-row zmm vectors where the
// CPU has AVX-512: S^T = Q^T-blocks x K and O^T = O^T * corr + P^T x V, register-blocked as the
// ymm ones are, but 32 rows x 8 keys (or 8 head_dim elements) a block instead of 16 x 6. Each
// output element is the same chain of f32 FMAs in the same order (acc = fma(q[e], k[e], acc) for
// e ascending from 0; acc = ot * corr, then fma(p[k], v[k], acc) for k ascending), so the results
// are the ymm kernel's bits. Per FMA the blocks load and broadcast half as much: on a Zen 4, whose
// zmm FMA rate equals its ymm one, that is the gain; where zmm FMAs issue on two ports (Intel
// Xeons) the peak doubles too.
#include <immintrin.h>

#include "backend/cpu/attention_common.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

namespace nanovllm::cpu::attention_detail {

namespace {

// S^T[k0 + u][r0 .. r0 + 16 NR) = sum_e Q^T[e][r0 ..] * K[k0 + u][e] for u < KB.
template <int NR, int KB>
inline void qk_block16(const float* qt, int64_t rp, int64_t r0, const float* kf, int64_t k0,
                       int64_t d, float* st) {
  __m512 acc[KB][NR];
#pragma GCC unroll 16
  for (int u = 0; u < KB; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) acc[u][i] = _mm512_setzero_ps();
  const float* kp = kf + k0 * d;
  for (int64_t e = 0; e < d; ++e) {
    __m512 qv[NR];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) qv[i] = _mm512_loadu_ps(qt + e * rp + r0 + 16 * i);
#pragma GCC unroll 16
    for (int u = 0; u < KB; ++u) {
      const __m512 kb = _mm512_set1_ps(kp[u * d + e]);
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i) acc[u][i] = _mm512_fmadd_ps(qv[i], kb, acc[u][i]);
    }
  }
#pragma GCC unroll 16
  for (int u = 0; u < KB; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) _mm512_storeu_ps(st + (k0 + u) * rp + r0 + 16 * i, acc[u][i]);
}

template <int NR>
void qk_rows16(const float* qt, int64_t rp, int64_t r0, const float* kf, int64_t n, int64_t d,
               float* st) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) qk_block16<NR, 8>(qt, rp, r0, kf, k, d, st);
  switch (n - k) {
    case 7:
      return qk_block16<NR, 7>(qt, rp, r0, kf, k, d, st);
    case 6:
      return qk_block16<NR, 6>(qt, rp, r0, kf, k, d, st);
    case 5:
      return qk_block16<NR, 5>(qt, rp, r0, kf, k, d, st);
    case 4:
      return qk_block16<NR, 4>(qt, rp, r0, kf, k, d, st);
    case 3:
      return qk_block16<NR, 3>(qt, rp, r0, kf, k, d, st);
    case 2:
      return qk_block16<NR, 2>(qt, rp, r0, kf, k, d, st);
    case 1:
      return qk_block16<NR, 1>(qt, rp, r0, kf, k, d, st);
    default:
      return;
  }
}

// O^T[d0 + u][r0 .. r0 + 16 NR) = O^T[..] * corr[r0 ..] + sum_k P^T[k][r0 ..] * V[k][d0 + u].
template <int NR, int DB>
inline void pv_block16(float* ot, int64_t rp, int64_t r0, int64_t d0, const float* corr,
                       const float* pt, const float* vf, int64_t n, int64_t d) {
  __m512 acc[DB][NR];
#pragma GCC unroll 16
  for (int i = 0; i < NR; ++i) {
    const __m512 c = _mm512_loadu_ps(corr + r0 + 16 * i);
#pragma GCC unroll 16
    for (int u = 0; u < DB; ++u)
      acc[u][i] = _mm512_mul_ps(_mm512_loadu_ps(ot + (d0 + u) * rp + r0 + 16 * i), c);
  }
  for (int64_t k = 0; k < n; ++k) {
    __m512 pv[NR];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) pv[i] = _mm512_loadu_ps(pt + k * rp + r0 + 16 * i);
#pragma GCC unroll 16
    for (int u = 0; u < DB; ++u) {
      const __m512 vb = _mm512_set1_ps(vf[k * d + d0 + u]);
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i) acc[u][i] = _mm512_fmadd_ps(pv[i], vb, acc[u][i]);
    }
  }
#pragma GCC unroll 16
  for (int u = 0; u < DB; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) _mm512_storeu_ps(ot + (d0 + u) * rp + r0 + 16 * i, acc[u][i]);
}

template <int NR>
void pv_rows16(float* ot, int64_t rp, int64_t r0, const float* corr, const float* pt,
               const float* vf, int64_t n, int64_t d) {
  int64_t e = 0;
  for (; e + 8 <= d; e += 8) pv_block16<NR, 8>(ot, rp, r0, e, corr, pt, vf, n, d);
  switch (d - e) {
    case 7:
      return pv_block16<NR, 7>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 6:
      return pv_block16<NR, 6>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 5:
      return pv_block16<NR, 5>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 4:
      return pv_block16<NR, 4>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 3:
      return pv_block16<NR, 3>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 2:
      return pv_block16<NR, 2>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 1:
      return pv_block16<NR, 1>(ot, rp, r0, e, corr, pt, vf, n, d);
    default:
      return;
  }
}

void qk_all(const float* qt, int64_t rp, const float* kf, int64_t n, int64_t d, float* st) {
  int64_t r0 = 0;
  for (; r0 + 32 <= rp; r0 += 32) qk_rows16<2>(qt, rp, r0, kf, n, d, st);
  if (r0 < rp) qk_rows16<1>(qt, rp, r0, kf, n, d, st);
}

void pv_all(float* ot, int64_t rp, const float* corr, const float* pt, const float* vf, int64_t n,
            int64_t d) {
  int64_t r0 = 0;
  for (; r0 + 32 <= rp; r0 += 32) pv_rows16<2>(ot, rp, r0, corr, pt, vf, n, d);
  if (r0 < rp) pv_rows16<1>(ot, rp, r0, corr, pt, vf, n, d);
}

}  // namespace

}  // namespace nanovllm::cpu::attention_detail

#pragma GCC pop_options

namespace nanovllm::cpu::attention_detail {

// Outside the AVX-512 target: declared (attention_common.h) for the AVX2 kernel's callers.
void qk_rows_avx512(const float* qt, int64_t rp, const float* kf, int64_t n, int64_t d, float* st) {
  qk_all(qt, rp, kf, n, d, st);
}

void pv_rows_avx512(float* ot, int64_t rp, const float* corr, const float* pt, const float* vf,
                    int64_t n, int64_t d) {
  pv_all(ot, rp, corr, pt, vf, n, d);
}

}  // namespace nanovllm::cpu::attention_detail
