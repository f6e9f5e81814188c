// CpuBackend::attention_prefill over the paged bf16 or fp8 KV cache: a tiled flash attention in f32
// on AVX2 (also run by attention_decode for GQA groups above 8). Where the GEMMs run on AVX-512
// BF16, prefill takes the same tiling on vdpbf16ps instead (attention_prefill_bf16.cpp).
//
// One work item = (sequence, kv head, block of query tokens): its rows are every query head of
// the GQA group for each of those tokens (about kRowsTarget rows, padded to a multiple of 8; on
// zmm about kRowsTargetZmm, padded to 16). The item walks its keys in tiles of up to
// kPrefillTile: the tile's K and V rows (found through the block table) are converted to f32 once
// and shared by all rows (on AVX-512 the whole item runs on zmm, attention_prefill_avx512.cpp:
// the same bits; the kernel itself is attention_prefill_kernel.inc, written once for both).
// Scores are computed
// transposed, S^T[key][row], by a register-blocked kernel that broadcasts one key element and
// multiplies it into 8-row vectors of Q^T (no horizontal sums); the online softmax (running max
// m, sum l) is then elementwise over row vectors, and O^T[d][row] += P^T[key][row] * V[key][d]
// likewise. Keys beyond the last row's causal limit are never visited; tiles that cross a row's
// limit are masked.
// Under a sliding window the walk starts at the tile holding the first row's first key, and
// tiles below a row's window start are masked for it (tiles stay at multiples of the tile, so a
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

constexpr int64_t kRowsTarget = 64;  // rows (tokens x group heads) per work item
// On zmm: 2 matmul blocks of 48 rows (with 32-row blocks, 96 rows ran 2-5% faster than 64 for
// 512-4,096-token prompts on an Intel Xeon, family 6 model 207, and 128 rows 10% slower at 1,024).
constexpr int64_t kRowsTargetZmm = 96;

// The kernel (attention_prefill_kernel.inc) on 8-row ymm vectors, matmul blocks of 2 vectors (16
// rows) x 6 keys or head_dim elements.
struct Ymm {
  using T = __m256;
  using M = __m256;  // all-ones lanes
  static constexpr int kLanes = 8, kBlock = 6, kRowVecs = 2;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(const float* p) { return _mm256_broadcast_ss(p); }
  static T splat(float x) { return _mm256_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T exp(T x) { return vec::exp(x); }
  static M valid(float key, T lo, T lim) {
    const T k = _mm256_set1_ps(key);
    return _mm256_and_ps(_mm256_cmp_ps(k, lim, _CMP_LT_OQ), _mm256_cmp_ps(k, lo, _CMP_GE_OQ));
  }
  static T select(M m, T s) { return _mm256_blendv_ps(_mm256_set1_ps(kNegInf), s, m); }
  static T keep(M m, T p) { return _mm256_and_ps(p, m); }
  static void widen_bf16(float* dst, const uint16_t* src, int64_t d) {
    bf16_row_to_f32(dst, src, d);
  }
};

#include "backend/cpu/attention_prefill_kernel.inc"

}  // namespace

void attention_detail::run_prefill_items(ThreadPool& pool, const AttnArgs& a,
                                         std::vector<PrefillItem>& items, bool zmm) {
  std::stable_sort(items.begin(), items.end(),
                   [](const PrefillItem& x, const PrefillItem& y) { return x.cost > y.cost; });
  run_dynamic(
      pool, int64_t(items.size()), [&] { return PrefillScratch(); },
      [&](int64_t i, PrefillScratch& sc) {
        if (zmm)
          run_prefill_item_avx512(a, items[size_t(i)], sc);
        else
          run_item<Ymm>(a, items[size_t(i)], sc);
      });
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
  const bool bf16 = prefill_bf16() && a.head_dim % 16 == 0, zmm = !bf16 && decode_avx512();
  const int64_t block_tokens = std::max<int64_t>(1, (zmm ? kRowsTargetZmm : kRowsTarget) / a.group);
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
  if (bf16)
    run_prefill_items_bf16(pool_, a, items);
  else
    run_prefill_items(pool_, a, items, zmm);
}

}  // namespace nanovllm::cpu
