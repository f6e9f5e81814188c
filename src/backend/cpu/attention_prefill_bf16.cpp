// The prefill kernel on AVX-512 BF16: the tiled flash attention of attention_prefill.cpp with both
// matmuls on vdpbf16ps (bf16 pairs, f32 accumulation), twice the f32 FMA rate. Used where the
// GEMMs use AVX-512 BF16 (CpuBackend::prefill_bf16()) and head_dim is a multiple of 16.
//
// Numerics: q is rounded to bf16 (the keys and values already are), scores are accumulated in
// f32 and scaled in f32; the softmax (running max m, sum l) is f32; P is rounded to bf16 for
// P.V, while l sums the unrounded P, so |out - exact| <= 2^-8 max|v| from the P rounding. Every
// row's arithmetic is fixed by its own position (key tiles at multiples of kTile, d pairs in
// order), never by the other rows of its item, so results do not depend on the batch or the
// chunking. A sliding window masks keys below each row's window start as attention_prefill.cpp
// does (and the walk starts at the tile of the first row's first key).
//
// Layouts (rp = the item's rows padded to 16, lanes = rows):
//   qp [D/2][rp] u32   (q[r][2p], q[r][2p+1]) as a bf16 pair
//   st [kTile][rp] f32 S^T, then P^T
//   pp [kTile/2][rp]   (P[r][2j], P[r][2j+1]) as a bf16 pair
//   vp [kTile/2][D]    (v[2j][e], v[2j+1][e]) as a bf16 pair (a zero key pads an odd tile)
//   ot [D][rp] f32     unnormalized O^T
// S^T[key][rows] = sum_p dpbf16(qp[p][rows], broadcast(k pair p)) reads the key's pairs straight
// from its bf16 row; O^T[e][rows] += sum_j dpbf16(pp[j][rows], broadcast(vp[j][e])).
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/attention_common.h"
#include "backend/cpu/vec_avx512.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")
// GCC 12 flags the _mm512_undefined_* pass-through inside unmasked intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace nanovllm::cpu::attention_detail {

namespace {

constexpr int64_t kTile = 64;  // keys per tile (even: P and V go in key pairs)
// A key row's bf16 pairs read as u32 (the row is written as u16: no strict-aliasing assumption).
using PairU32 = uint32_t __attribute__((__may_alias__));

struct Bf16Scratch {
  std::vector<uint32_t> qp, pp, vp;
  std::vector<float> st, ot, m, l, corr, lim, lo;
  std::vector<uint16_t> stage;  // an fp8 tile's K then V rows as bf16: [2][kTile][D]
  std::vector<uint16_t> zero;   // [D] zeros
};

inline __m512i pairs16(__m512 lo, __m512 hi) {  // bf16(lo) | bf16(hi) << 16, per lane
  const __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
  const __m512i b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
  return _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
}

// S^T[k0 + u][r0 .. r0 + 16 NR) for u < KB: unscaled q . k.
template <int NR, int KB>
inline void qk_block(const uint32_t* qp, int64_t rp, int64_t r0, const uint16_t* const* krow,
                     int64_t k0, int64_t dp, float* st) {
  __m512 acc[KB][NR];
#pragma GCC unroll 16
  for (int u = 0; u < KB; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) acc[u][i] = _mm512_setzero_ps();
  const PairU32* kp[KB];
#pragma GCC unroll 16
  for (int u = 0; u < KB; ++u) kp[u] = reinterpret_cast<const PairU32*>(krow[k0 + u]);
  for (int64_t p = 0; p < dp; ++p) {
    __m512i qv[NR];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) qv[i] = _mm512_loadu_si512(qp + p * rp + r0 + 16 * i);
#pragma GCC unroll 16
    for (int u = 0; u < KB; ++u) {
      const __m512i kb = _mm512_set1_epi32(int(kp[u][p]));
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i)
        acc[u][i] = _mm512_dpbf16_ps(acc[u][i], (__m512bh)qv[i], (__m512bh)kb);
    }
  }
#pragma GCC unroll 16
  for (int u = 0; u < KB; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) _mm512_storeu_ps(st + (k0 + u) * rp + r0 + 16 * i, acc[u][i]);
}

template <int NR>
void qk_rows(const uint32_t* qp, int64_t rp, int64_t r0, const uint16_t* const* krow, int64_t n,
             int64_t dp, float* st) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) qk_block<NR, 8>(qp, rp, r0, krow, k, dp, st);
  switch (n - k) {
    case 7: return qk_block<NR, 7>(qp, rp, r0, krow, k, dp, st);
    case 6: return qk_block<NR, 6>(qp, rp, r0, krow, k, dp, st);
    case 5: return qk_block<NR, 5>(qp, rp, r0, krow, k, dp, st);
    case 4: return qk_block<NR, 4>(qp, rp, r0, krow, k, dp, st);
    case 3: return qk_block<NR, 3>(qp, rp, r0, krow, k, dp, st);
    case 2: return qk_block<NR, 2>(qp, rp, r0, krow, k, dp, st);
    case 1: return qk_block<NR, 1>(qp, rp, r0, krow, k, dp, st);
    default: return;
  }
}

// O^T[d0 + u][r0 .. r0 + 16 NR) = O^T[..] * corr + sum_j pp[j][..] . vp[j][d0 + u], u < DB.
template <int NR, int DB>
inline void pv_block(float* ot, int64_t rp, int64_t r0, int64_t d0, const float* corr,
                     const uint32_t* pp, const uint32_t* vp, int64_t np, int64_t d) {
  __m512 acc[DB][NR];
#pragma GCC unroll 16
  for (int i = 0; i < NR; ++i) {
    const __m512 c = _mm512_loadu_ps(corr + r0 + 16 * i);
#pragma GCC unroll 16
    for (int u = 0; u < DB; ++u)
      acc[u][i] = _mm512_mul_ps(_mm512_loadu_ps(ot + (d0 + u) * rp + r0 + 16 * i), c);
  }
  for (int64_t j = 0; j < np; ++j) {
    __m512i pv[NR];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) pv[i] = _mm512_loadu_si512(pp + j * rp + r0 + 16 * i);
#pragma GCC unroll 16
    for (int u = 0; u < DB; ++u) {
      const __m512i vb = _mm512_set1_epi32(int(vp[j * d + d0 + u]));
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i)
        acc[u][i] = _mm512_dpbf16_ps(acc[u][i], (__m512bh)pv[i], (__m512bh)vb);
    }
  }
#pragma GCC unroll 16
  for (int u = 0; u < DB; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) _mm512_storeu_ps(ot + (d0 + u) * rp + r0 + 16 * i, acc[u][i]);
}

template <int NR>
void pv_rows(float* ot, int64_t rp, int64_t r0, const float* corr, const uint32_t* pp,
             const uint32_t* vp, int64_t np, int64_t d) {  // d % 16 == 0
  for (int64_t e = 0; e < d; e += 8) pv_block<NR, 8>(ot, rp, r0, e, corr, pp, vp, np, d);
}

void run_item(const AttnArgs& a, const PrefillItem& it, Bf16Scratch& sc) {
  const int64_t d = a.head_dim, dp = d / 2, g = a.group;
  const int64_t rows = (it.t1 - it.t0) * g, rp = (rows + 15) / 16 * 16;
  sc.qp.resize(size_t(dp * rp));
  sc.ot.assign(size_t(d * rp), 0.0f);
  sc.st.resize(size_t(kTile * rp));
  sc.pp.resize(size_t(kTile / 2 * rp));
  sc.vp.resize(size_t(kTile / 2 * d));
  for (auto* v : {&sc.m, &sc.l, &sc.corr, &sc.lim, &sc.lo}) v->resize(size_t(rp));
  // Row r: prefill_row (attention_common.h); padding rows' results are dropped.
  for (int64_t r = 0; r < rp; ++r) {
    const PrefillRow row = prefill_row(a, it, rows, r);
    sc.lim[size_t(r)] = row.limit;
    sc.lo[size_t(r)] = row.first;
    sc.m[size_t(r)] = kNegInf;
    sc.l[size_t(r)] = 0.0f;
    for (int64_t p = 0; p < dp; ++p)
      sc.qp[size_t(p * rp + r)] =
          uint32_t(f32_to_bf16(row.q[2 * p])) | uint32_t(f32_to_bf16(row.q[2 * p + 1])) << 16;
  }
  const int32_t* table = a.block_tables + it.seq * a.max_num_blocks;
  const int64_t num_keys = int64_t(sc.lim[size_t(rows - 1)]);  // the last row sees the most
  const int64_t min_keys = int64_t(sc.lim[0]);
  const int64_t max_first = int64_t(sc.lo[size_t(rows - 1)]);  // 0 without a sliding window
  const int64_t first_key0 = int64_t(sc.lo[0]), start = first_key0 / kTile * kTile;
  sc.zero.resize(size_t(d));  // zeros, never written: the row of a key below every row's window
  auto prefetch_keys = [&](int64_t k0, int64_t k1) {
    prefetch_head_keys(a, table, it.kv_head, k0, k1);
  };
  if (a.k_fp8) sc.stage.resize(size_t(2 * kTile * d));
  const uint16_t* krow[kTile];
  const uint16_t* vrow[kTile];
  float* st = sc.st.data();
  const __m512 vscale = _mm512_set1_ps(a.scale);
  prefetch_keys(start, std::min(start + kTile, num_keys));
  for (int64_t c0 = start; c0 < num_keys; c0 += kTile) {
    const int64_t n = std::min(kTile, num_keys - c0), np = (n + 1) / 2;
    prefetch_keys(c0 + kTile, std::min(c0 + 2 * kTile, num_keys));
    for (int64_t j = 0; j < n; ++j) {
      if (c0 + j < first_key0) {  // below every row's window (its block may be freed): masked
        krow[j] = vrow[j] = sc.zero.data();
        continue;
      }
      const int64_t off = token_row(a, table, c0 + j) + it.kv_head * d;
      if (a.k_fp8) {  // the codes' values, exactly; the scales are applied outside
        uint16_t* sk = sc.stage.data() + j * d;
        uint16_t* sv = sc.stage.data() + (kTile + j) * d;
        fp8_row_to_bf16(sk, a.k_fp8 + off, d);
        fp8_row_to_bf16(sv, a.v_fp8 + off, d);
        krow[j] = sk;
        vrow[j] = sv;
      } else {
        krow[j] = a.k_cache + off;
        vrow[j] = a.v_cache + off;
      }
    }
    // V as key pairs; an odd tile's last pair takes a zero key (its P is 0 as well).
    for (int64_t j = 0; j < np; ++j) {
      const uint16_t* v0 = vrow[2 * j];
      const uint16_t* v1 = 2 * j + 1 < n ? vrow[2 * j + 1] : nullptr;
      for (int64_t e = 0; e < d; e += 16) {
        const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(v0 + e)));
        const __m512i hi =
            v1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(v1 + e)))
               : _mm512_setzero_si512();
        _mm512_storeu_si512(sc.vp.data() + j * d + e, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
    int64_t r0 = 0;
    for (; r0 + 32 <= rp; r0 += 32) qk_rows<2>(sc.qp.data(), rp, r0, krow, n, dp, st);
    if (r0 < rp) qk_rows<1>(sc.qp.data(), rp, r0, krow, n, dp, st);
    // Online softmax over 16-row vectors; S^T becomes P^T (masked entries 0), then bf16 pairs.
    const bool masked = c0 + n > min_keys || c0 < max_first;
    for (int64_t r = 0; r < rp; r += 16) {
      const __m512 lim = _mm512_loadu_ps(sc.lim.data() + r);
      const __m512 lo = _mm512_loadu_ps(sc.lo.data() + r);
      auto valid = [&](int64_t k) {  // lo <= key < lim
        const __m512 key = _mm512_set1_ps(float(c0 + k));
        return __mmask16(_mm512_cmp_ps_mask(key, lim, _CMP_LT_OQ) &
                         _mm512_cmp_ps_mask(key, lo, _CMP_GE_OQ));
      };
      auto score = [&](int64_t k) {
        const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(st + k * rp + r), vscale);
        if (!masked) return s;
        return _mm512_mask_blend_ps(valid(k), _mm512_set1_ps(kNegInf), s);
      };
      __m512 mx = _mm512_set1_ps(kNegInf);
      for (int64_t k = 0; k < n; ++k) mx = _mm512_max_ps(mx, score(k));
      const __m512 m_old = _mm512_loadu_ps(sc.m.data() + r);
      // -inf only for a row that has seen no key yet (a sliding window's masked tiles)
      const __m512 m_new = _mm512_max_ps(m_old, mx);
      const __m512 corr = vec::exp16(_mm512_sub_ps(m_old, m_new));
      __m512 sum = _mm512_setzero_ps();
      for (int64_t k = 0; k < n; ++k) {
        __m512 p = vec::exp16(_mm512_sub_ps(score(k), m_new));
        if (masked) p = _mm512_maskz_mov_ps(valid(k), p);
        _mm512_storeu_ps(st + k * rp + r, p);
        sum = _mm512_add_ps(sum, p);
      }
      for (int64_t j = 0; j < np; ++j) {
        const __m512 p0 = _mm512_loadu_ps(st + 2 * j * rp + r);
        const __m512 p1 = 2 * j + 1 < n ? _mm512_loadu_ps(st + (2 * j + 1) * rp + r) : _mm512_setzero_ps();
        _mm512_storeu_si512(sc.pp.data() + j * rp + r, pairs16(p0, p1));
      }
      _mm512_storeu_ps(sc.l.data() + r, _mm512_fmadd_ps(_mm512_loadu_ps(sc.l.data() + r), corr, sum));
      _mm512_storeu_ps(sc.m.data() + r, m_new);
      _mm512_storeu_ps(sc.corr.data() + r, corr);
    }
    for (r0 = 0; r0 + 32 <= rp; r0 += 32)
      pv_rows<2>(sc.ot.data(), rp, r0, sc.corr.data(), sc.pp.data(), sc.vp.data(), np, d);
    if (r0 < rp) pv_rows<1>(sc.ot.data(), rp, r0, sc.corr.data(), sc.pp.data(), sc.vp.data(), np, d);
  }
  write_prefill_rows(a, it, rows, rp, sc.ot.data(), sc.l.data());
}

void run_items(ThreadPool& pool, const AttnArgs& a, std::vector<PrefillItem>& items) {
  std::stable_sort(items.begin(), items.end(),
                   [](const PrefillItem& x, const PrefillItem& y) { return x.cost > y.cost; });
  run_dynamic(
      pool, int64_t(items.size()), [] { return Bf16Scratch(); },
      [&](int64_t i, Bf16Scratch& sc) { run_item(a, items[size_t(i)], sc); });
}

}  // namespace

#pragma GCC diagnostic pop
#pragma GCC pop_options

// Outside the AVX-512 target: declared (attention_common.h) for the AVX2 one.
void run_prefill_items_bf16(ThreadPool& pool, const AttnArgs& a, std::vector<PrefillItem>& items) {
  NV_CHECK(a.head_dim % 16 == 0, "the bf16 prefill kernel needs head_dim % 16 == 0, got {}",
           a.head_dim);
  run_items(pool, a, items);
}

}  // namespace nanovllm::cpu::attention_detail
