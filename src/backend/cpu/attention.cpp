// Paged attention over the bf16 KV cache: store_kv, attention_prefill, attention_decode.
//
// Prefill: a tiled flash attention. One work item = (sequence, kv head, block of query tokens):
// its rows are every query head of the GQA group for each of those tokens (about kRowsTarget
// rows, padded to a multiple of 8). The item walks its keys in tiles of up to kTile: the tile's K
// and V rows (found through the block table) are converted to f32 once and shared by all rows.
// Scores are computed transposed, S^T[key][row], by a register-blocked kernel that broadcasts one
// key element and multiplies it into 8-row vectors of Q^T (no horizontal sums); the online
// softmax (running max m, sum l) is then elementwise over row vectors, and O^T[d][row] +=
// P^T[key][row] * V[key][d] likewise. Keys beyond the last row's causal limit are never
// visited; tiles that cross a row's limit are masked.
//
// Decode: one work item = (sequence, partition of its context), all kv heads: the keys of a
// partition are walked in chunks of kDecodeChunk token rows, each row holding every kv head
// contiguously ([Hkv, D] bf16), so the cache is streamed in address order and prefetched a chunk
// ahead. Each query head keeps an online softmax state; a sequence split into several partitions
// (flash-decoding: when there are few sequences, so that all threads have work) writes partial
// states that are merged in partition order afterwards.
//
// Items go to the pool's threads dynamically, most expensive first; how the work is split
// depends only on the batch shape, never on the thread count, and each item's arithmetic does
// not depend on which thread runs it, so results are identical for any thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"

#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

namespace {

constexpr int64_t kTile = 48;          // prefill: keys per tile (K and V staged as f32)
constexpr int64_t kRowsTarget = 64;    // prefill: rows (tokens x group heads) per work item
constexpr int64_t kDecodeChunk = 16;   // decode: token rows per step
constexpr int64_t kPartitionMin = 256; // decode: fewest keys per partition of a split sequence
constexpr int64_t kDecodeItemsTarget = 16;  // decode: split sequences until about this many items

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// What every item of one attention call shares.
struct AttnArgs {
  const float* q;  // [T, Hq, D], token stride q_stride, head stride q_head_stride
  int64_t q_stride, q_head_stride;
  float* out;               // [T, Hq, D] contiguous
  const uint16_t* k_cache;  // [num_blocks, block_size, Hkv, D] bf16
  const uint16_t* v_cache;
  int64_t num_blocks, block_size, num_kv_heads, head_dim, group;  // group = Hq / Hkv
  const int32_t* block_tables;                                    // [num_seqs, max_num_blocks]
  int64_t max_num_blocks;
  float scale;
};

// Element offset of key `key`'s token row ([Hkv, D]) in the cache of sequence row `table`.
inline int64_t token_row(const AttnArgs& a, const int32_t* table, int64_t key) {
  const int64_t block = table[key / a.block_size];
  NV_CHECK(block >= 0 && block < a.num_blocks, "block table entry {} (of {} blocks) for key {}",
           block, a.num_blocks, key);
  return (block * a.block_size + key % a.block_size) * a.num_kv_heads * a.head_dim;
}

inline void bf16_row_to_f32(float* dst, const uint16_t* src, int64_t d) {
  for (int64_t i = 0; i < d; i += 8) _mm256_storeu_ps(dst + i, vec::load_bf16(src + i));
}

// ================================ prefill ================================

struct PrefillItem {
  int64_t seq;  // row of block_tables
  int64_t kv_head;
  int64_t q_begin;    // first token row of the sequence in q
  int64_t t0, t1;     // token rows [t0, t1) of this item
  int64_t first_pos;  // position of token row q_begin (= context_len - seqlen_q)
  int64_t cost;       // rows * keys, for ordering
};

// Per-thread buffers; rp = the item's row count padded to 8 (the row stride of the ^T arrays).
struct PrefillScratch {
  std::vector<float> qt;    // [D][rp]      Q^T, pre-multiplied by the scale
  std::vector<float> kf;    // [kTile][D]   the tile's keys, f32
  std::vector<float> vf;    // [kTile][D]   the tile's values, f32
  std::vector<float> st;    // [kTile][rp]  S^T, then P^T
  std::vector<float> ot;    // [D][rp]      unnormalized O^T
  std::vector<float> m, l, corr, lim;  // [rp] running max, running sum, rescale, causal limit
};

// S^T[k0 + u][r0 .. r0 + 8 NR) = sum_d Q^T[d][r0 ..] * K[k0 + u][d] for u < KB.
template <int NR, int KB>
inline void qk_block(const float* qt, int64_t rp, int64_t r0, const float* kf, int64_t k0,
                     int64_t d, float* st) {
  __m256 acc[KB][NR];
  #pragma GCC unroll 16
  for (int u = 0; u < KB; ++u)
    #pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) acc[u][i] = _mm256_setzero_ps();
  const float* kp = kf + k0 * d;
  for (int64_t e = 0; e < d; ++e) {
    __m256 qv[NR];
    #pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) qv[i] = _mm256_loadu_ps(qt + e * rp + r0 + 8 * i);
    #pragma GCC unroll 16
    for (int u = 0; u < KB; ++u) {
      const __m256 kb = _mm256_broadcast_ss(kp + u * d + e);
      #pragma GCC unroll 16
      for (int i = 0; i < NR; ++i) acc[u][i] = _mm256_fmadd_ps(qv[i], kb, acc[u][i]);
    }
  }
  #pragma GCC unroll 16
  for (int u = 0; u < KB; ++u)
    #pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) _mm256_storeu_ps(st + (k0 + u) * rp + r0 + 8 * i, acc[u][i]);
}

template <int NR>
void qk_rows(const float* qt, int64_t rp, int64_t r0, const float* kf, int64_t n, int64_t d,
             float* st) {
  int64_t k = 0;
  for (; k + 6 <= n; k += 6) qk_block<NR, 6>(qt, rp, r0, kf, k, d, st);
  switch (n - k) {
    case 5: return qk_block<NR, 5>(qt, rp, r0, kf, k, d, st);
    case 4: return qk_block<NR, 4>(qt, rp, r0, kf, k, d, st);
    case 3: return qk_block<NR, 3>(qt, rp, r0, kf, k, d, st);
    case 2: return qk_block<NR, 2>(qt, rp, r0, kf, k, d, st);
    case 1: return qk_block<NR, 1>(qt, rp, r0, kf, k, d, st);
    default: return;
  }
}

// O^T[d0 + u][r0 .. r0 + 8 NR) = O^T[..] * corr[r0 ..] + sum_k P^T[k][r0 ..] * V[k][d0 + u].
template <int NR, int DB>
inline void pv_block(float* ot, int64_t rp, int64_t r0, int64_t d0, const float* corr,
                     const float* pt, const float* vf, int64_t n, int64_t d) {
  __m256 acc[DB][NR];
  #pragma GCC unroll 16
  for (int i = 0; i < NR; ++i) {
    const __m256 c = _mm256_loadu_ps(corr + r0 + 8 * i);
    #pragma GCC unroll 16
    for (int u = 0; u < DB; ++u)
      acc[u][i] = _mm256_mul_ps(_mm256_loadu_ps(ot + (d0 + u) * rp + r0 + 8 * i), c);
  }
  for (int64_t k = 0; k < n; ++k) {
    __m256 pv[NR];
    #pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) pv[i] = _mm256_loadu_ps(pt + k * rp + r0 + 8 * i);
    #pragma GCC unroll 16
    for (int u = 0; u < DB; ++u) {
      const __m256 vb = _mm256_broadcast_ss(vf + k * d + d0 + u);
      #pragma GCC unroll 16
      for (int i = 0; i < NR; ++i) acc[u][i] = _mm256_fmadd_ps(pv[i], vb, acc[u][i]);
    }
  }
  #pragma GCC unroll 16
  for (int u = 0; u < DB; ++u)
    #pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) _mm256_storeu_ps(ot + (d0 + u) * rp + r0 + 8 * i, acc[u][i]);
}

template <int NR>
void pv_rows(float* ot, int64_t rp, int64_t r0, const float* corr, const float* pt,
             const float* vf, int64_t n, int64_t d) {
  int64_t e = 0;
  for (; e + 6 <= d; e += 6) pv_block<NR, 6>(ot, rp, r0, e, corr, pt, vf, n, d);
  switch (d - e) {
    case 5: return pv_block<NR, 5>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 4: return pv_block<NR, 4>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 3: return pv_block<NR, 3>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 2: return pv_block<NR, 2>(ot, rp, r0, e, corr, pt, vf, n, d);
    case 1: return pv_block<NR, 1>(ot, rp, r0, e, corr, pt, vf, n, d);
    default: return;
  }
}

void run_prefill_item(const AttnArgs& a, const PrefillItem& it, PrefillScratch& sc) {
  const int64_t d = a.head_dim, g = a.group;
  const int64_t rows = (it.t1 - it.t0) * g, rp = (rows + 7) / 8 * 8;
  sc.qt.resize(size_t(d * rp));
  sc.ot.assign(size_t(d * rp), 0.0f);
  sc.st.resize(size_t(kTile * rp));
  for (auto* v : {&sc.m, &sc.l, &sc.corr, &sc.lim}) v->resize(size_t(rp));
  // Row r (r < rows): token t0 + r / g, query head kv_head * g + r % g; it sees keys
  // [0, lim[r]). Padding rows repeat the last row (their results are dropped).
  for (int64_t r = 0; r < rows; ++r) {  // the q rows come from memory: request them all first
    const int64_t t = it.t0 + r / g, h = it.kv_head * g + r % g;
    const char* q = reinterpret_cast<const char*>(a.q + t * a.q_stride + h * a.q_head_stride);
    for (int64_t b = 0; b < d * 4; b += 64) _mm_prefetch(q + b, _MM_HINT_T0);
  }
  for (int64_t r = 0; r < rp; ++r) {
    const int64_t rr = std::min(r, rows - 1);
    const int64_t t = it.t0 + rr / g, h = it.kv_head * g + rr % g;
    sc.lim[size_t(r)] = float(it.first_pos + (t - it.q_begin) + 1);
    sc.m[size_t(r)] = kNegInf;
    sc.l[size_t(r)] = 0.0f;
    const float* q = a.q + t * a.q_stride + h * a.q_head_stride;
    for (int64_t e = 0; e < d; ++e) sc.qt[size_t(e * rp + r)] = q[e] * a.scale;
  }
  const int32_t* table = a.block_tables + it.seq * a.max_num_blocks;
  const int64_t num_keys = int64_t(sc.lim[size_t(rows - 1)]);  // the last row sees the most
  const int64_t min_keys = int64_t(sc.lim[0]);
  float* st = sc.st.data();
  const int64_t row_bytes = d * 2;
  auto prefetch_keys = [&](int64_t k0, int64_t k1) {  // this head's K and V rows, into L2
    for (int64_t key = k0; key < k1; ++key) {
      const int64_t block = table[key / a.block_size];
      if (block < 0 || block >= a.num_blocks) continue;  // checked when the key is reached
      const int64_t off =
          ((block * a.block_size + key % a.block_size) * a.num_kv_heads + it.kv_head) * d;
      for (int64_t b = 0; b < row_bytes; b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(a.k_cache + off) + b, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(a.v_cache + off) + b, _MM_HINT_T1);
      }
    }
  };
  prefetch_keys(0, std::min(kTile, num_keys));
  for (int64_t c0 = 0; c0 < num_keys; c0 += kTile) {
    const int64_t n = std::min(kTile, num_keys - c0);
    prefetch_keys(c0 + kTile, std::min(c0 + 2 * kTile, num_keys));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t off = token_row(a, table, c0 + j) + it.kv_head * d;
      bf16_row_to_f32(sc.kf.data() + j * d, a.k_cache + off, d);
      bf16_row_to_f32(sc.vf.data() + j * d, a.v_cache + off, d);
    }
    int64_t r0 = 0;
    for (; r0 + 16 <= rp; r0 += 16) qk_rows<2>(sc.qt.data(), rp, r0, sc.kf.data(), n, d, st);
    if (r0 < rp) qk_rows<1>(sc.qt.data(), rp, r0, sc.kf.data(), n, d, st);
    // Online softmax over 8-row vectors; S^T becomes P^T (masked entries 0).
    const bool masked = c0 + n > min_keys;
    for (int64_t r = 0; r < rp; r += 8) {
      const __m256 lim = _mm256_loadu_ps(sc.lim.data() + r);
      __m256 mx = _mm256_set1_ps(kNegInf);
      for (int64_t k = 0; k < n; ++k) {
        __m256 s = _mm256_loadu_ps(st + k * rp + r);
        if (masked) {
          const __m256 valid = _mm256_cmp_ps(_mm256_set1_ps(float(c0 + k)), lim, _CMP_LT_OQ);
          s = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), s, valid);
        }
        mx = _mm256_max_ps(mx, s);
      }
      const __m256 m_old = _mm256_loadu_ps(sc.m.data() + r);
      const __m256 m_new = _mm256_max_ps(m_old, mx);  // finite: key 0 is in every row's first tile
      const __m256 corr = vec::exp(_mm256_sub_ps(m_old, m_new));
      __m256 sum = _mm256_setzero_ps();
      for (int64_t k = 0; k < n; ++k) {
        __m256 p = vec::exp(_mm256_sub_ps(_mm256_loadu_ps(st + k * rp + r), m_new));
        if (masked)
          p = _mm256_and_ps(p, _mm256_cmp_ps(_mm256_set1_ps(float(c0 + k)), lim, _CMP_LT_OQ));
        _mm256_storeu_ps(st + k * rp + r, p);
        sum = _mm256_add_ps(sum, p);
      }
      _mm256_storeu_ps(sc.l.data() + r,
                       _mm256_fmadd_ps(_mm256_loadu_ps(sc.l.data() + r), corr, sum));
      _mm256_storeu_ps(sc.m.data() + r, m_new);
      _mm256_storeu_ps(sc.corr.data() + r, corr);
    }
    for (r0 = 0; r0 + 16 <= rp; r0 += 16)
      pv_rows<2>(sc.ot.data(), rp, r0, sc.corr.data(), st, sc.vf.data(), n, d);
    if (r0 < rp) pv_rows<1>(sc.ot.data(), rp, r0, sc.corr.data(), st, sc.vf.data(), n, d);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = it.t0 + r / g, h = it.kv_head * g + r % g;
    float* o = a.out + (t * a.num_kv_heads * g + h) * d;
    const float inv = 1.0f / sc.l[size_t(r)];
    for (int64_t e = 0; e < d; ++e) o[e] = sc.ot[size_t(e * rp + r)] * inv;
  }
}

// ================================ decode ================================

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

// ================================ common ================================

// fn(i, state) for i < n on the pool's threads, dynamically in index order; each thread's state
// comes from make_state().
template <class MakeState, class F>
void run_dynamic(ThreadPool& pool, int64_t n, MakeState&& make_state, F&& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    auto state = make_state();
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      fn(i, state);
    }
  };
  if (pool.size() == 1 || n == 1) {
    work();
  } else {
    pool.run_on_all([&](int) { work(); });
  }
}

const LayerKVCache& check_cache(const LayerKVCache& cache) {
  const Tensor& k = cache.k;
  const Tensor& v = cache.v;
  NV_CHECK(k.ndim == 4 && k.dtype == DType::BF16 && k.is_contiguous() && v.ndim == 4 &&
               v.dtype == DType::BF16 && v.is_contiguous(),
           "KV cache k {} v {}: expected contiguous bf16 [num_blocks, block_size, Hkv, D]",
           k.describe(), v.describe());
  for (int d = 0; d < 4; ++d)
    NV_CHECK(k.shape[d] == v.shape[d], "KV cache k {} v {}", k.describe(), v.describe());
  return cache;
}

AttnArgs make_args(Tensor out, Tensor q, const LayerKVCache& cache, const ForwardBatch& batch,
                   float scale) {
  check_cache(cache);
  NV_CHECK(batch.host != nullptr, "the CPU backend reads ForwardBatch::host");
  const HostBatch& hb = *batch.host;
  NV_CHECK(q.ndim == 3 && q.dtype == DType::F32 && q.stride[2] == 1 && out.ndim == 3 &&
               out.dtype == DType::F32 && out.is_contiguous(),
           "attention out {} q {}: expected f32 [T, Hq, D]", out.describe(), q.describe());
  for (int d = 0; d < 3; ++d)
    NV_CHECK(out.shape[d] == q.shape[d], "attention out {} q {}", out.describe(), q.describe());
  AttnArgs a{};
  a.q = q.ptr<const float>();
  a.q_stride = q.stride[0];
  a.q_head_stride = q.stride[1];
  a.out = out.ptr<float>();
  a.k_cache = cache.k.ptr<const uint16_t>();
  a.v_cache = cache.v.ptr<const uint16_t>();
  a.num_blocks = cache.k.shape[0];
  a.block_size = cache.k.shape[1];
  a.num_kv_heads = cache.k.shape[2];
  a.head_dim = cache.k.shape[3];
  NV_CHECK(q.shape[2] == a.head_dim && a.head_dim % 8 == 0 && q.shape[1] % a.num_kv_heads == 0,
           "attention q {} over a KV cache {} (head_dim must be a multiple of 8)", q.describe(),
           cache.k.describe());
  a.group = q.shape[1] / a.num_kv_heads;
  a.block_tables = hb.block_tables.data();
  a.max_num_blocks = hb.max_num_blocks;
  a.scale = scale;
  return a;
}

// Tokens in the KV cache of seq b once this step's are stored.
int64_t context_len(const HostBatch& hb, int b) {
  if (!hb.context_lens.empty()) return hb.context_lens[size_t(b)];
  NV_CHECK(hb.cu_seqlens_k.size() == size_t(hb.num_seqs()) + 1, "no context_lens nor cu_seqlens_k");
  return hb.cu_seqlens_k[size_t(b) + 1] - hb.cu_seqlens_k[size_t(b)];
}

void check_context(const AttnArgs& a, const HostBatch& hb, int64_t ctx, int64_t seqlen_q, int b) {
  NV_CHECK(int64_t(hb.block_tables.size()) >= (b + 1) * a.max_num_blocks,
           "block_tables holds {} entries, seq {} needs {} per row", hb.block_tables.size(), b,
           a.max_num_blocks);
  NV_CHECK(seqlen_q >= 1 && ctx >= seqlen_q, "seq {}: {} new tokens in a context of {}", b,
           seqlen_q, ctx);
  NV_CHECK(ctx <= a.max_num_blocks * a.block_size, "seq {}: context {} exceeds {} blocks of {}", b,
           ctx, a.max_num_blocks, a.block_size);
}

}  // namespace

// cache.k.view(-1, Hkv, D)[slot_mapping[t]] = k[t] (as bf16), likewise v; slot -1: skipped
void CpuBackend::store_kv(Tensor k, Tensor v, const LayerKVCache& cache,
                          const ForwardBatch& batch) {
  check_cache(cache);
  NV_CHECK(batch.host != nullptr, "the CPU backend reads ForwardBatch::host");
  const std::vector<int32_t>& slots = batch.host->slot_mapping;
  const int64_t hkv = cache.k.shape[2], d = cache.k.shape[3];
  const int64_t num_slots = cache.k.shape[0] * cache.k.shape[1];
  for (const Tensor* t : {&k, &v})
    NV_CHECK(t->ndim == 3 && t->dtype == DType::F32 && t->stride[2] == 1 && t->shape[1] == hkv &&
                 t->shape[2] == d && t->shape[0] == int64_t(slots.size()),
             "store_kv {} for {} slots into a cache of {}", t->describe(), slots.size(),
             cache.k.describe());
  parallel_rows(k.shape[0], 2 * hkv * d, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = slots[size_t(t)];
      if (slot == -1) continue;
      NV_CHECK(slot >= 0 && slot < num_slots, "slot {} of {} at token {}", slot, num_slots, t);
      for (int kv = 0; kv < 2; ++kv) {
        const Tensor& src = kv == 0 ? k : v;
        uint16_t* dst = (kv == 0 ? cache.k : cache.v).ptr<uint16_t>() + slot * hkv * d;
        for (int64_t h = 0; h < hkv; ++h) {
          const float* x = src.ptr<const float>() + t * src.stride[0] + h * src.stride[1];
          uint16_t* y = dst + h * d;
          int64_t i = 0;
          for (; i + 8 <= d; i += 8) vec::store_bf16(y + i, _mm256_loadu_ps(x + i));
          for (; i < d; ++i) y[i] = f32_to_bf16(x[i]);
        }
      }
    }
  });
}

// Per seq b, with K, V = its cached keys/values [ctx_b, Hkv, D] repeated over the GQA group:
// out[rows of b] = F.scaled_dot_product_attention(q, K, V, scale=scale) under the causal mask
// that lets query i (at position ctx_b - seqlen_q_b + i) see keys [0, that position].
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
        const int64_t keys = ctx - (q1 - q0) + (t1 - q0);
        items.push_back({b, h, q0, t0, t1, ctx - (q1 - q0), (t1 - t0) * keys});
      }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const PrefillItem& x, const PrefillItem& y) { return x.cost > y.cost; });
  run_dynamic(
      pool_, int64_t(items.size()),
      [&] {
        PrefillScratch sc;
        sc.kf.resize(size_t(kTile * a.head_dim));
        sc.vf.resize(size_t(kTile * a.head_dim));
        return sc;
      },
      [&](int64_t i, PrefillScratch& sc) { run_prefill_item(a, items[size_t(i)], sc); });
}

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
    std::stable_sort(items.begin(), items.end(),
                     [](const PrefillItem& x, const PrefillItem& y) { return x.cost > y.cost; });
    run_dynamic(
        pool_, int64_t(items.size()),
        [&] {
          PrefillScratch sc;
          sc.kf.resize(size_t(kTile * a.head_dim));
          sc.vf.resize(size_t(kTile * a.head_dim));
          return sc;
        },
        [&](int64_t i, PrefillScratch& sc) { run_prefill_item(a, items[size_t(i)], sc); });
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
