// CpuBackend::attention_decode over the paged bf16 KV cache: flash-decoding.
//
// One work item = (sequence, partition of its context), all kv heads: the keys of a partition
// are walked in chunks of kDecodeChunk token rows, each row holding every kv head contiguously
// ([Hkv, D] bf16), so the cache is streamed in address order and prefetched a chunk ahead. Each
// query head keeps an online softmax state; a sequence split into several partitions (when there
// are few sequences, so that all threads have work) writes partial states that are merged in
// partition order afterwards. GQA groups above 8 go to the prefill kernel instead.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"

#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

using namespace attention_detail;

namespace {

constexpr int64_t kDecodeChunk = 16;        // token rows per step
constexpr int64_t kPartitionMin = 256;      // fewest keys per partition of a split sequence
constexpr int64_t kDecodeItemsTarget = 16;  // split sequences until about this many items

// exp(s[j] - m) into s[j] for j < n (s has room for n rounded up to 8); returns their sum.
inline float exp_shift_sum(float* s, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    __m256 e = vec::exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    if (n - j < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(vec::tail_mask(n - j)));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  return vec::hsum(sum);
}

// One kv head over n (<= kDecodeChunk) keys for its R query rows (one token): the key and value
// rows are read straight from the bf16 cache, each once for all R rows, with several keys in
// flight to hide the FMA latency. m, l: [R]; acc: [R][D] (the running softmax states).
template <int R>
inline void decode_head_chunk(const AttnArgs& a, const float* const* q, const uint16_t* const* krow,
                              const uint16_t* const* vrow, int64_t n, float* m, float* l,
                              float* acc) {
  constexpr int kKeys = R <= 2 ? 4 : R <= 4 ? 2 : 1;   // keys per score step
  constexpr int kWidth = R <= 2 ? 4 : R <= 4 ? 2 : 1;  // 8-float vectors per P.V step
  const int64_t d = a.head_dim;
  alignas(32) float s[R][kDecodeChunk];
  float corr[R];
  // s[r][j] = scale * q_r . k_j
  int64_t j = 0;
  for (; j + kKeys <= n; j += kKeys) {
    __m256 dot[kKeys][R];
    #pragma GCC unroll 16
    for (int u = 0; u < kKeys; ++u)
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) dot[u][r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8)
      #pragma GCC unroll 16
      for (int u = 0; u < kKeys; ++u) {
        const __m256 kv = vec::load_bf16(krow[j + u] + i);
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
          dot[u][r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i), kv, dot[u][r]);
      }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if constexpr (kKeys == 4) {
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(dot[0][r], dot[1][r]),
                                        _mm256_hadd_ps(dot[2][r], dot[3][r]));
        const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        _mm_storeu_ps(&s[r][j], _mm_mul_ps(sum, _mm_set1_ps(a.scale)));
      } else {
        #pragma GCC unroll 16
        for (int u = 0; u < kKeys; ++u) s[r][j + u] = vec::hsum(dot[u][r]) * a.scale;
      }
    }
  }
  for (; j < n; ++j) {
    __m256 dot[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) dot[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 kv = vec::load_bf16(krow[j] + i);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) dot[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i), kv, dot[r]);
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) s[r][j] = vec::hsum(dot[r]) * a.scale;
  }
  // online softmax: s[r] becomes the chunk's unnormalized probabilities
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float cm = s[r][0];
    for (int64_t u = 1; u < n; ++u) cm = std::max(cm, s[r][u]);
    const float m_new = std::max(m[r], cm);
    corr[r] = std::exp(m[r] - m_new);
    l[r] = l[r] * corr[r] + exp_shift_sum(s[r], n, m_new);
    m[r] = m_new;
  }
  // acc_r = acc_r * corr_r + sum_j s[r][j] * v_j, kWidth vectors of acc per pass over the keys
  auto pv_block = [&]<int W>(int64_t i) {
    __m256 o[R][W];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int w = 0; w < W; ++w)
        o[r][w] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * d + i + 8 * w), _mm256_set1_ps(corr[r]));
    for (int64_t u = 0; u < n; ++u) {
      __m256 vv[W];
      #pragma GCC unroll 16
      for (int w = 0; w < W; ++w) vv[w] = vec::load_bf16(vrow[u] + i + 8 * w);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256 p = _mm256_broadcast_ss(&s[r][u]);
        #pragma GCC unroll 16
        for (int w = 0; w < W; ++w) o[r][w] = _mm256_fmadd_ps(p, vv[w], o[r][w]);
      }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int w = 0; w < W; ++w) _mm256_storeu_ps(acc + r * d + i + 8 * w, o[r][w]);
  };
  int64_t i = 0;
  for (; i + 8 * kWidth <= d; i += 8 * kWidth) pv_block.template operator()<kWidth>(i);
  for (; i < d; i += 8) pv_block.template operator()<1>(i);
}

struct DecodeItem {
  int64_t seq;         // row of block_tables and of q
  int64_t k0, k1;      // keys [k0, k1) of the sequence
  int64_t part;        // index of this partition within the sequence
  float* partial;      // nullptr: the only partition, normalize into out; else [Hq][D + 2]
};

// Softmax states of every query head of item.seq over keys [k0, k1). m, l: [Hq]; acc: [Hq][D].
template <int G>
void decode_partition(const AttnArgs& a, const DecodeItem& it, float* m, float* l, float* acc) {
  const int64_t d = a.head_dim, hkv = a.num_kv_heads, hq = hkv * G;
  const int32_t* table = a.block_tables + it.seq * a.max_num_blocks;
  for (int64_t h = 0; h < hq; ++h) {
    m[h] = kNegInf;
    l[h] = 0.0f;
  }
  std::fill(acc, acc + hq * d, 0.0f);
  const int64_t row_bytes = hkv * d * 2;
  auto prefetch_row = [&](int64_t key) {
    const int64_t block = table[key / a.block_size];
    if (block < 0 || block >= a.num_blocks) return;  // checked when the key is reached
    const int64_t off = (block * a.block_size + key % a.block_size) * hkv * d;
    const char* kp = reinterpret_cast<const char*>(a.k_cache + off);
    const char* vp = reinterpret_cast<const char*>(a.v_cache + off);
    for (int64_t b = 0; b < row_bytes; b += 64) {
      _mm_prefetch(kp + b, _MM_HINT_T1);
      _mm_prefetch(vp + b, _MM_HINT_T1);
    }
  };
  for (int64_t key = it.k0; key < std::min(it.k0 + kDecodeChunk, it.k1); ++key) prefetch_row(key);
  int64_t rows[kDecodeChunk];
  const uint16_t* krow[kDecodeChunk];
  const uint16_t* vrow[kDecodeChunk];
  const float* q[G];
  for (int64_t c0 = it.k0; c0 < it.k1; c0 += kDecodeChunk) {
    const int64_t n = std::min(kDecodeChunk, it.k1 - c0);
    for (int64_t j = 0; j < n; ++j) rows[j] = token_row(a, table, c0 + j);
    // The next chunk's token rows (every kv head) stream in while this one is computed.
    for (int64_t key = c0 + kDecodeChunk; key < std::min(c0 + 2 * kDecodeChunk, it.k1); ++key)
      prefetch_row(key);
    for (int64_t h = 0; h < hkv; ++h) {
      for (int64_t j = 0; j < n; ++j) {
        krow[j] = a.k_cache + rows[j] + h * d;
        vrow[j] = a.v_cache + rows[j] + h * d;
      }
      #pragma GCC unroll 16
      for (int r = 0; r < G; ++r) q[r] = a.q + it.seq * a.q_stride + (h * G + r) * a.q_head_stride;
      decode_head_chunk<G>(a, q, krow, vrow, n, m + h * G, l + h * G, acc + h * G * d);
    }
  }
}

template <int G>
void run_decode_item(const AttnArgs& a, const DecodeItem& it, std::vector<float>& scratch) {
  const int64_t d = a.head_dim, hq = a.num_kv_heads * G;
  scratch.resize(size_t(hq * (d + 2)));
  float* m = scratch.data();
  float* l = m + hq;
  float* acc = l + hq;
  decode_partition<G>(a, it, m, l, acc);
  if (it.partial) {
    std::copy(scratch.begin(), scratch.end(), it.partial);
    return;
  }
  for (int64_t h = 0; h < hq; ++h) {
    float* o = a.out + (it.seq * hq + h) * d;
    const float inv = 1.0f / l[h];
    for (int64_t e = 0; e < d; ++e) o[e] = acc[h * d + e] * inv;
  }
}

// out[seq] from the partial states [parts][Hq][D + 2] (m, l, acc per partition), in order.
void merge_partials(const AttnArgs& a, int64_t seq, const float* partial, int64_t parts) {
  const int64_t d = a.head_dim, hq = a.num_kv_heads * a.group, stride = hq * (d + 2);
  for (int64_t h = 0; h < hq; ++h) {
    float mx = kNegInf;
    for (int64_t p = 0; p < parts; ++p) mx = std::max(mx, partial[p * stride + h]);
    float* o = a.out + (seq * hq + h) * d;
    std::fill(o, o + d, 0.0f);
    float l = 0.0f;
    for (int64_t p = 0; p < parts; ++p) {
      const float* part = partial + p * stride;
      const float w = std::exp(part[h] - mx);
      l += part[hq + h] * w;
      const float* acc = part + 2 * hq + h * d;
      for (int64_t e = 0; e < d; ++e) o[e] += acc[e] * w;
    }
    const float inv = 1.0f / l;
    for (int64_t e = 0; e < d; ++e) o[e] *= inv;
  }
}

}  // namespace

// attention_prefill with one new token per sequence: out[b] = softmax(scale * q[b] K_b^T) V_b
void CpuBackend::attention_decode(Tensor out, Tensor q, const LayerKVCache& cache,
                                  const ForwardBatch& batch, float scale) {
  const AttnArgs a = make_args(out, q, cache, batch, scale);
  const HostBatch& hb = *batch.host;
  const int num_seqs = int(q.shape[0]);
  NV_CHECK(hb.context_lens.size() == size_t(num_seqs) ||
               (hb.context_lens.empty() && hb.cu_seqlens_k.size() == size_t(num_seqs) + 1),
           "decode of q {} with {} context lengths", q.describe(), hb.context_lens.size());
  if (num_seqs == 0) return;
  if (a.group > 8) {  // large GQA groups: the prefill kernel, one item per (seq, kv head)
    std::vector<PrefillItem> items;
    for (int b = 0; b < num_seqs; ++b) {
      const int64_t ctx = context_len(hb, b);
      check_context(a, hb, ctx, 1, b);
      for (int64_t h = 0; h < a.num_kv_heads; ++h) items.push_back({b, h, b, b, b + 1, ctx - 1, ctx});
    }
    run_prefill_items(pool_, a, items);
    return;
  }
  // Split each sequence into partitions (of at least kPartitionMin keys) while there are fewer
  // than kDecodeItemsTarget items: a function of the batch alone, not of the thread count.
  const int64_t want_parts = (kDecodeItemsTarget + num_seqs - 1) / num_seqs;
  const int64_t hq = a.num_kv_heads * a.group, state = hq * (a.head_dim + 2);
  std::vector<DecodeItem> items;
  std::vector<int64_t> seq_parts(static_cast<size_t>(num_seqs));
  int64_t partial_items = 0;
  for (int b = 0; b < num_seqs; ++b) {
    const int64_t ctx = context_len(hb, b);
    check_context(a, hb, ctx, 1, b);
    const int64_t parts = std::clamp<int64_t>(ctx / kPartitionMin, 1, want_parts);
    seq_parts[size_t(b)] = parts;
    for (int64_t p = 0; p < parts; ++p)
      items.push_back({b, ctx * p / parts, ctx * (p + 1) / parts, p, nullptr});
    if (parts > 1) partial_items += parts;
  }
  std::vector<float> partials(size_t(partial_items * state));
  float* next_partial = partials.data();
  for (auto& it : items)
    if (seq_parts[size_t(it.seq)] > 1) {
      it.partial = next_partial;
      next_partial += state;
    }
  std::stable_sort(items.begin(), items.end(), [](const DecodeItem& x, const DecodeItem& y) {
    return x.k1 - x.k0 > y.k1 - y.k0;
  });
  run_dynamic(
      pool_, int64_t(items.size()), [] { return std::vector<float>(); },
      [&](int64_t i, std::vector<float>& sc) {
        const DecodeItem& it = items[size_t(i)];
        switch (a.group) {
          case 1: return run_decode_item<1>(a, it, sc);
          case 2: return run_decode_item<2>(a, it, sc);
          case 3: return run_decode_item<3>(a, it, sc);
          case 4: return run_decode_item<4>(a, it, sc);
          case 5: return run_decode_item<5>(a, it, sc);
          case 6: return run_decode_item<6>(a, it, sc);
          case 7: return run_decode_item<7>(a, it, sc);
          default: return run_decode_item<8>(a, it, sc);
        }
      });
  if (partial_items == 0) return;
  // Partials of one sequence are contiguous, in partition order (allocated in item order).
  const float* base = partials.data();
  for (int b = 0; b < num_seqs; ++b)
    if (seq_parts[size_t(b)] > 1) {
      merge_partials(a, b, base, seq_parts[size_t(b)]);
      base += seq_parts[size_t(b)] * state;
    }
}

}  // namespace nanovllm::cpu
