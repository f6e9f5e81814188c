// CpuBackend::attention_prefill over the paged bf16 or fp8 KV cache: a tiled flash attention in f32
// on AVX2 (also run by attention_decode for GQA groups above 8). Where the GEMMs run on AVX-512
// BF16, prefill takes the same tiling on vdpbf16ps instead (attention_prefill_bf16.cpp).
//
// One work item = (sequence, kv head, block of query tokens): its rows are every query head of
// the GQA group for each of those tokens (about kRowsTarget rows, padded to a multiple of 8; of 16
// on zmm). The item walks its keys in tiles of up to kTile: the tile's K and V rows (found
// through the block table) are converted to f32 once and shared by all rows (on AVX-512 the two
// matmuls run on zmm, attention_prefill_avx512.cpp: the same bits). Scores are computed
// transposed, S^T[key][row], by a register-blocked kernel that broadcasts one key element and
// multiplies it into 8-row vectors of Q^T (no horizontal sums); the online softmax (running max
// m, sum l) is then elementwise over row vectors, and O^T[d][row] += P^T[key][row] * V[key][d]
// likewise. Keys beyond the last row's causal limit are never visited; tiles that cross a row's
// limit are masked.
// Under a sliding window the walk starts at the tile holding the first row's first key, and
// tiles below a row's window start are masked for it (tiles stay at multiples of kTile, so a
// row's arithmetic never depends on the other rows of its item); keys below the first row's
// window are not read at all (their blocks may be freed: BlockManager::free_slid_out_blocks). A
// row that has seen only masked keys keeps m = -inf, l = 0, O = 0: exp's clamp turns -inf - -inf
// into a tiny factor, never NaN.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"

#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

using namespace attention_detail;

namespace {

constexpr int64_t kTile = 48;        // keys per tile (K and V staged as f32)
constexpr int64_t kRowsTarget = 64;  // rows (tokens x group heads) per work item

// Per-thread buffers; rp = the item's row count padded to 8 (the row stride of the ^T arrays).
struct PrefillScratch {
  std::vector<float> qt;    // [D][rp]      Q^T, pre-multiplied by the scale
  std::vector<float> kf;    // [kTile][D]   the tile's keys, f32
  std::vector<float> vf;    // [kTile][D]   the tile's values, f32
  std::vector<float> st;    // [kTile][rp]  S^T, then P^T
  std::vector<float> ot;    // [D][rp]      unnormalized O^T
  std::vector<float> m, l, corr, lim, lo;  // [rp] running max, sum, rescale, key bounds
};

// The matmul blocks (attention_prefill_blocks.inc) on 8-row ymm vectors, 6 keys or head_dim
// elements a block.
struct Ymm {
  using T = __m256;
  static constexpr int kLanes = 8, kBlock = 6;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(const float* p) { return _mm256_broadcast_ss(p); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
};

#include "backend/cpu/attention_prefill_blocks.inc"

// zmm: the matmuls on AVX-512 (attention_prefill_avx512.cpp; rows padded to 16, not 8).
void run_prefill_item(const AttnArgs& a, const PrefillItem& it, PrefillScratch& sc, bool zmm) {
  const int64_t d = a.head_dim, g = a.group, pad = zmm ? 16 : 8;
  const int64_t rows = (it.t1 - it.t0) * g, rp = (rows + pad - 1) / pad * pad;
  sc.qt.resize(size_t(d * rp));
  sc.ot.assign(size_t(d * rp), 0.0f);
  sc.st.resize(size_t(kTile * rp));
  for (auto* v : {&sc.m, &sc.l, &sc.corr, &sc.lim, &sc.lo}) v->resize(size_t(rp));
  // Row r: prefill_row (attention_common.h); padding rows' results are dropped.
  for (int64_t r = 0; r < rows; ++r) {  // the q rows come from memory: request them all first
    const char* q = reinterpret_cast<const char*>(prefill_row(a, it, rows, r).q);
    for (int64_t b = 0; b < d * 4; b += 64) _mm_prefetch(q + b, _MM_HINT_T0);
  }
  for (int64_t r = 0; r < rp; ++r) {
    const PrefillRow row = prefill_row(a, it, rows, r);
    sc.lim[size_t(r)] = row.limit;
    sc.lo[size_t(r)] = row.first;
    sc.m[size_t(r)] = kNegInf;
    sc.l[size_t(r)] = 0.0f;
    for (int64_t e = 0; e < d; ++e) sc.qt[size_t(e * rp + r)] = row.q[e] * a.scale;
  }
  const int32_t* table = a.block_tables + it.seq * a.max_num_blocks;
  const int64_t num_keys = int64_t(sc.lim[size_t(rows - 1)]);  // the last row sees the most
  const int64_t min_keys = int64_t(sc.lim[0]);
  const int64_t max_first = int64_t(sc.lo[size_t(rows - 1)]);  // 0 without a sliding window
  const int64_t first_key0 = int64_t(sc.lo[0]), start = first_key0 / kTile * kTile;
  float* st = sc.st.data();
  auto prefetch_keys = [&](int64_t k0, int64_t k1) {
    prefetch_head_keys(a, table, it.kv_head, k0, k1);
  };
  // The tiles' K and V rows go to L2 two tiles ahead (one ahead: 4,096-token prompts 6-8% slower
  // on a Zen 4, bench_attention).
  prefetch_keys(start, std::min(start + 2 * kTile, num_keys));
  for (int64_t c0 = start; c0 < num_keys; c0 += kTile) {
    const int64_t n = std::min(kTile, num_keys - c0);
    prefetch_keys(c0 + 2 * kTile, std::min(c0 + 3 * kTile, num_keys));
    for (int64_t j = 0; j < n; ++j) {
      if (c0 + j < first_key0) {  // below every row's window (its block may be freed): masked
        std::fill(sc.kf.data() + j * d, sc.kf.data() + (j + 1) * d, 0.0f);
        std::fill(sc.vf.data() + j * d, sc.vf.data() + (j + 1) * d, 0.0f);
        continue;
      }
      const int64_t off = token_row(a, table, c0 + j) + it.kv_head * d;
      if (a.k_fp8) {  // the codes' values (exact); the scales are applied outside
        fp8_row_to_f32(sc.kf.data() + j * d, a.k_fp8 + off, d);
        fp8_row_to_f32(sc.vf.data() + j * d, a.v_fp8 + off, d);
      } else {
        bf16_row_to_f32(sc.kf.data() + j * d, a.k_cache + off, d);
        bf16_row_to_f32(sc.vf.data() + j * d, a.v_cache + off, d);
      }
    }
    if (zmm)
      qk_rows_avx512(sc.qt.data(), rp, sc.kf.data(), n, d, st);
    else
      qk_all<Ymm>(sc.qt.data(), rp, sc.kf.data(), n, d, st);
    // Online softmax over 8-row vectors; S^T becomes P^T (masked entries 0).
    const bool masked = c0 + n > min_keys || c0 < max_first;
    for (int64_t r = 0; r < rp; r += 8) {
      const __m256 lim = _mm256_loadu_ps(sc.lim.data() + r);
      const __m256 lo = _mm256_loadu_ps(sc.lo.data() + r);
      auto valid = [&](int64_t k) {  // lo <= key < lim
        const __m256 key = _mm256_set1_ps(float(c0 + k));
        return _mm256_and_ps(_mm256_cmp_ps(key, lim, _CMP_LT_OQ),
                             _mm256_cmp_ps(key, lo, _CMP_GE_OQ));
      };
      __m256 mx = _mm256_set1_ps(kNegInf);
      for (int64_t k = 0; k < n; ++k) {
        __m256 s = _mm256_loadu_ps(st + k * rp + r);
        if (masked) s = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), s, valid(k));
        mx = _mm256_max_ps(mx, s);
      }
      const __m256 m_old = _mm256_loadu_ps(sc.m.data() + r);
      // -inf only for a row that has seen no key yet (a sliding window's masked tiles)
      const __m256 m_new = _mm256_max_ps(m_old, mx);
      const __m256 corr = vec::exp(_mm256_sub_ps(m_old, m_new));
      __m256 sum = _mm256_setzero_ps();
      for (int64_t k = 0; k < n; ++k) {
        __m256 p = vec::exp(_mm256_sub_ps(_mm256_loadu_ps(st + k * rp + r), m_new));
        if (masked) p = _mm256_and_ps(p, valid(k));
        _mm256_storeu_ps(st + k * rp + r, p);
        sum = _mm256_add_ps(sum, p);
      }
      _mm256_storeu_ps(sc.l.data() + r,
                       _mm256_fmadd_ps(_mm256_loadu_ps(sc.l.data() + r), corr, sum));
      _mm256_storeu_ps(sc.m.data() + r, m_new);
      _mm256_storeu_ps(sc.corr.data() + r, corr);
    }
    if (zmm)
      pv_rows_avx512(sc.ot.data(), rp, sc.corr.data(), st, sc.vf.data(), n, d);
    else
      pv_all<Ymm>(sc.ot.data(), rp, sc.corr.data(), st, sc.vf.data(), n, d);
  }
  write_prefill_rows(a, it, rows, rp, sc.ot.data(), sc.l.data());
}

}  // namespace

void attention_detail::run_prefill_items(ThreadPool& pool, const AttnArgs& a,
                                         std::vector<PrefillItem>& items, bool zmm) {
  std::stable_sort(items.begin(), items.end(),
                   [](const PrefillItem& x, const PrefillItem& y) { return x.cost > y.cost; });
  run_dynamic(
      pool, int64_t(items.size()),
      [&] {
        PrefillScratch sc;
        sc.kf.resize(size_t(kTile * a.head_dim));
        sc.vf.resize(size_t(kTile * a.head_dim));
        return sc;
      },
      [&](int64_t i, PrefillScratch& sc) { run_prefill_item(a, items[size_t(i)], sc, zmm); });
}

// Per seq b, with K, V = its cached keys/values [ctx_b, Hkv, D] repeated over the GQA group:
// out[rows of b] = F.scaled_dot_product_attention(q, K, V, scale=scale) under the causal mask
// that lets query i (at position p = ctx_b - seqlen_q_b + i) see keys [0, p], or (p - W, p]
// under a sliding window W (cache.sliding_window).
void CpuBackend::attention_prefill(Tensor out, Tensor q, const LayerKVCache& cache,
                                   const ForwardBatch& batch, float scale) {
  const AttnArgs a = make_args(out, q, cache, batch, scale);
  const HostBatch& hb = *batch.host;
  const int num_seqs = hb.num_seqs();
  NV_CHECK(num_seqs >= 1 && hb.cu_seqlens_q[0] == 0 && hb.cu_seqlens_q.back() == q.shape[0] &&
               (hb.context_lens.empty() || hb.context_lens.size() == size_t(num_seqs)),
           "prefill of q {} with {} seqs", q.describe(), num_seqs);
  const int64_t block_tokens = std::max<int64_t>(1, kRowsTarget / a.group);
  std::vector<PrefillItem> items;
  for (int b = 0; b < num_seqs; ++b) {
    const int64_t q0 = hb.cu_seqlens_q[size_t(b)], q1 = hb.cu_seqlens_q[size_t(b) + 1];
    const int64_t ctx = context_len(hb, b);
    check_context(a, hb, ctx, q1 - q0, b);
    for (int64_t h = 0; h < a.num_kv_heads; ++h)
      for (int64_t t0 = q0; t0 < q1; t0 += block_tokens) {
        const int64_t t1 = std::min(q1, t0 + block_tokens);
        const int64_t pos0 = ctx - (q1 - q0) + (t0 - q0);  // the item's first row's position
        const int64_t keys = ctx - (q1 - q0) + (t1 - q0) - first_key(a, pos0);
        items.push_back({b, h, q0, t0, t1, ctx - (q1 - q0), (t1 - t0) * keys});
      }
  }
  if (prefill_bf16() && a.head_dim % 16 == 0)
    run_prefill_items_bf16(pool_, a, items);
  else
    run_prefill_items(pool_, a, items, decode_avx512());
}

}  // namespace nanovllm::cpu
