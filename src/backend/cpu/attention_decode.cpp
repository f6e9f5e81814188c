// CpuBackend::attention_decode over the paged bf16 or fp8 KV cache: flash-decoding. Both
// read the cache in place; an fp8 code is widened in registers (load8, load_pairs: exact, with
// its 2^-8 folded into the scales; attention_common.h: the cache's own scales).
//
// One work item = (sequence, partition of its context), all kv heads (with fewer items than
// threads, a range of them: attention_decode below): the keys of a partition
// are walked in chunks of kDecodeChunk token rows, each row holding every kv head contiguously
// ([Hkv, D]). The AVX-512 path reads whole rows (or the item's slice) in address order, the order
// its hardware prefetcher streamed at full rate on Zen 4. The AVX2 path reads kv head by kv head
// (on Zen 3 this beat copying each chunk's rows in address order into a stage). Both prefetch the
// next chunk's rows into L2 under the current one. Each query head keeps an online softmax state; a
// sequence whose context is longer than kPartitionKeys is split into partitions (so that long
// contexts use every thread) that write partial states merged in partition order afterwards.
// Under a sliding window W the keys are the last W of the context: the first partition starts
// at the window's start, the others at the same multiples of kPartitionKeys as without one.
// GQA groups above 8 go to the prefill kernel instead.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"
#include "backend/cpu/vec_avx512.h"

#pragma GCC target("avx2,fma,f16c")

namespace nanovllm::cpu {

using namespace attention_detail;

namespace {

constexpr int64_t kDecodeChunk = 16;        // token rows per step
// Keys per partition: a sequence's context is split at multiples of this, whatever the batch
// (batch invariance: a sequence's output never depends on the other sequences of the step).
constexpr int64_t kPartitionKeys = 512;

// Both paths read the cache in place, bf16 (T = uint16_t) or fp8 E4M3 codes (T = uint8_t). An
// fp8 code is read as code * 2^-8: its byte sign-extended to 16 bits and shifted left by 7 is,
// with bit 14 cleared, the fp16 of that value, subnormals included (exact), which vcvtph2ps
// widens to f32. The factor 2^-8 is undone exactly (a power of two): in the score scale (or q)
// and at the output, so every result is the one of the codes' values rounded as for bf16.
// 0x7F / 0xFF (E4M3's NaN, which the cache's rounding never writes) read as +-480.
template <class T>
constexpr float kLoadScale = sizeof(T) == 1 ? 256.0f : 1.0f;  // cache value / loaded value

// The cache's K and V arrays read as T.
template <class T>
inline std::pair<const T*, const T*> kv_arrays(const AttnArgs& a) {
  if constexpr (sizeof(T) == 1)
    return {a.k_fp8, a.v_fp8};
  else
    return {a.k_cache, a.v_cache};
}

// 8 cache elements as f32 (times 1 / kLoadScale<T>).
inline __m256 load8(const uint16_t* p) { return vec::load_bf16(p); }
inline __m256 load8(const uint8_t* p) {
  const __m128i c = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(c, 7), _mm_set1_epi16(int16_t(0xBFFF))));
}

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

// The next chunk's K and V rows, prefetched into L2 a line of each at a time (next()), spread
// through the current chunk's work: one burst per kv head stalled on the CPU's miss buffers.
struct ChunkPrefetch {
  const char* k = nullptr;
  const char* v = nullptr;
  int64_t elem = 2;               // bytes per cache element
  const int64_t* rows = nullptr;  // token_row() offsets of the next chunk
  int64_t row_lines = 1;
  int64_t done = 0, end = 0;      // lines issued, lines to issue by the end of this kv head
  void next() {
    if (done >= end) return;
    const int64_t off = rows[done / row_lines] * elem + (done % row_lines) * 64;
    _mm_prefetch(k + off, _MM_HINT_T1);
    _mm_prefetch(v + off, _MM_HINT_T1);
    ++done;
  }
  void finish() {
    while (done < end) next();
  }
};

// One kv head over n (<= kDecodeChunk) keys for its R query rows (one token): the key and value
// rows are read straight from the cache, each once for all R rows, with several keys in flight
// to hide the FMA latency. m, l: [R]; acc: [R][D] (the running softmax states, acc divided by
// kLoadScale<T>).
template <int R, class T>
inline void decode_head_chunk(const AttnArgs& a, const float* const* q, const T* const* krow,
                              const T* const* vrow, int64_t n, float* m, float* l, float* acc,
                              ChunkPrefetch& pf) {
  constexpr int kKeys = R <= 2 ? 4 : R <= 4 ? 2 : 1;   // keys per score step
  constexpr int kWidth = R <= 2 ? 4 : R <= 4 ? 2 : 1;  // 8-float vectors per P.V step
  const int64_t d = a.head_dim;
  alignas(32) float s[R][kDecodeChunk];
  float corr[R];
  const float scale = a.scale * kLoadScale<T>;  // (q . k / 2^8) * (scale * 2^8): one rounding
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
        const __m256 kv = load8(krow[j + u] + i);
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
        _mm_storeu_ps(&s[r][j], _mm_mul_ps(sum, _mm_set1_ps(scale)));
      } else {
        #pragma GCC unroll 16
        for (int u = 0; u < kKeys; ++u) s[r][j + u] = vec::hsum(dot[u][r]) * scale;
      }
    }
  }
  for (; j < n; ++j) {
    __m256 dot[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) dot[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 kv = load8(krow[j] + i);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) dot[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i), kv, dot[r]);
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) s[r][j] = vec::hsum(dot[r]) * scale;
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
      pf.next();
      __m256 vv[W];
      #pragma GCC unroll 16
      for (int w = 0; w < W; ++w) vv[w] = load8(vrow[u] + i + 8 * w);
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

// Per-thread buffers: the softmax states (and the partial copied out).
struct DecodeScratch {
  std::vector<float> f;
};

struct DecodeItem {
  int64_t seq;         // row of block_tables and of q
  int64_t k0, k1;      // keys [k0, k1) of the sequence
  int64_t part;        // index of this partition within the sequence
  float* partial;      // nullptr: the only partition, normalize into out; else [Hq][D + 2]
  // kv heads [h0, h1) (h1 == 0: all). With fewer items than threads a sequence's heads are split
  // over items (the AVX-512 path: in whole blocks of 16 query heads): each head's arithmetic is
  // the same either way, so no bit moves.
  int64_t h0 = 0, h1 = 0;
};

// Softmax states of the query heads of kv heads [h0, h1) of item.seq over keys [k0, k1).
// m, l: [Hq]; acc: [Hq][D] (the item's heads written, divided by kLoadScale<T>).
template <int G, class T>
void decode_partition(const AttnArgs& a, const DecodeItem& it, int64_t h0, int64_t h1, float* m,
                      float* l, float* acc) {
  const int64_t d = a.head_dim;
  const auto [k_cache, v_cache] = kv_arrays<T>(a);
  const int32_t* table = a.block_tables + it.seq * a.max_num_blocks;
  for (int64_t h = h0 * G; h < h1 * G; ++h) {
    m[h] = kNegInf;
    l[h] = 0.0f;
  }
  std::fill(acc + h0 * G * d, acc + h1 * G * d, 0.0f);
  const T* krow[kDecodeChunk];
  const T* vrow[kDecodeChunk];
  int64_t rows[kDecodeChunk], next_rows[kDecodeChunk];
  const float* q[G];
  // The cache is read in place, and the next chunk's rows (K and V) are prefetched into L2
  // during this chunk's P.V loops (ChunkPrefetch), so that the per-head reads (D elements at a
  // stride of one row) find them there: 1.7x the copy of each chunk into a stage that this
  // replaced (bench_attention, 16 sequences x 1,024 keys, Zen 3, 2 threads: 4.3 -> 2.55 ms per
  // layer; without the prefetch 4.1).
  // Lines of the item's heads within a row (the slice prefetched).
  const int64_t row_lines = ((h1 - h0) * d * int64_t(sizeof(T)) + 63) / 64;
  for (int64_t j = 0; j < std::min(kDecodeChunk, it.k1 - it.k0); ++j)
    next_rows[j] = token_row(a, table, it.k0 + j);
  for (int64_t c0 = it.k0; c0 < it.k1; c0 += kDecodeChunk) {
    const int64_t n = std::min(kDecodeChunk, it.k1 - c0);
    const int64_t c1 = c0 + kDecodeChunk;
    const int64_t nn = std::max<int64_t>(0, std::min(kDecodeChunk, it.k1 - c1));
    std::copy(next_rows, next_rows + n, rows);
    for (int64_t j = 0; j < nn; ++j) next_rows[j] = token_row(a, table, c1 + j);
    ChunkPrefetch pf;
    pf.k = reinterpret_cast<const char*>(k_cache + h0 * d);
    pf.v = reinterpret_cast<const char*>(v_cache + h0 * d);
    pf.elem = int64_t(sizeof(T));
    pf.rows = next_rows;
    pf.row_lines = row_lines;
    const int64_t pf_total = nn * row_lines;  // lines of each of K and V
    for (int64_t h = h0; h < h1; ++h) {
      pf.end = pf_total * (h - h0 + 1) / (h1 - h0);
      for (int64_t j = 0; j < n; ++j) {
        krow[j] = k_cache + rows[j] + h * d;
        vrow[j] = v_cache + rows[j] + h * d;
      }
      #pragma GCC unroll 16
      for (int r = 0; r < G; ++r) q[r] = a.q + it.seq * a.q_stride + (h * G + r) * a.q_head_stride;
      decode_head_chunk<G, T>(a, q, krow, vrow, n, m + h * G, l + h * G, acc + h * G * d, pf);
      pf.finish();
    }
  }
}

template <int G>
void run_decode_item(const AttnArgs& a, const DecodeItem& it, DecodeScratch& sc) {
  const int64_t d = a.head_dim, hq = a.num_kv_heads * G;
  const int64_t h0 = it.h0, h1 = it.h1 > 0 ? it.h1 : a.num_kv_heads;
  std::vector<float>& scratch = sc.f;
  scratch.resize(size_t(hq * (d + 2)));
  float* m = scratch.data();
  float* l = m + hq;
  float* acc = l + hq;
  const bool fp8 = a.k_fp8 != nullptr;
  if (fp8)
    decode_partition<G, uint8_t>(a, it, h0, h1, m, l, acc);
  else
    decode_partition<G, uint16_t>(a, it, h0, h1, m, l, acc);
  const float acc_scale = fp8 ? kLoadScale<uint8_t> : kLoadScale<uint16_t>;
  if (it.partial) {  // this item's heads of the partial state [m: Hq][l: Hq][acc: Hq][D]
    std::copy(m + h0 * G, m + h1 * G, it.partial + h0 * G);
    std::copy(l + h0 * G, l + h1 * G, it.partial + hq + h0 * G);
    for (int64_t e = h0 * G * d; e < h1 * G * d; ++e) it.partial[2 * hq + e] = acc[e] * acc_scale;
    return;
  }
  for (int64_t h = h0 * G; h < h1 * G; ++h) {
    float* o = a.out + (it.seq * hq + h) * d;
    // (out_scale * 2^8) / l is out_scale / l times 2^8 exactly: one rounding, as for bf16.
    const float inv = a.out_scale * acc_scale / l[h];
    for (int64_t e = 0; e < d; ++e) o[e] = acc[h * d + e] * inv;
  }
}

// ---- AVX-512 path ----
// Runtime dispatch (use_avx512): AVX-512F/BW/VL/DQ, head_dim 64 or 128, GQA group 1/2/4/8 and a
// multiple of 16 query heads; NANOVLLM_CPU_ISA=avx2 (isa.h) forces the AVX2 path above.
//
// A pair of bf16 loaded as one u32 holds two f32 values at once: (x << 16) is the even element
// and (x & 0xffff0000) the odd one, so 32 cache elements become 2 x 16 f32 with two integer ops
// and no shuffle. q and the accumulators are kept in the matching layout: within each 32-element
// block of a head, its 16 even elements, then its 16 odd ones (permute_head / unpermute_head).
//
// Scores are computed key by key for 16 query heads at once (one lane each): the key's token
// row ([Hkv, D] bf16) is read in address order, and the 16 dot products are reduced together
// by a transposed reduction into one vector. The online softmax is vectorized over those lanes;
// P.V then reads the chunk's value rows whole, in address order too (pv_key). On Zen 4, reading
// a row a kv head at a time (256 bytes at a 2 KiB stride) streamed at 10-11 GB/s per core, whole
// rows in order at 16-17, and a software prefetch near ahead within the stream made it slower
// (13 GB/s). The next chunk's rows are prefetched into L2 under the current one instead (a K row
// per key of the scores, a V row per key of P.V), as the AVX2 path does: on an Intel Xeon
// (family 6 model 207, 2 threads, bench_attention --decode, medians of eight interleaved
// rounds) 16 sequences x 1,024 keys took 3.69 ms a layer against 4.28 without it, one sequence
// x 16,384 keys 3.70 against 4.40, one x 1,024 0.24 against 0.275. Not measured on Zen 4.
// That prefetch is spread over the work of the key it rides with, a kv head's slice of the row
// beside that kv head's loads (score_key, pv_key), not issued as one burst of a row's 32 lines
// before it: under perf (timer samples, one thread, 16 x 1,024 keys from memory) 40% of the
// kernel's samples sat on the bursts' prefetcht1 loops, stalled on the CPU's miss buffers with
// no arithmetic behind them. Spread, on the same Xeon (2 threads, medians of five interleaved
// rounds, ms a layer, before / after): bf16 16 x 1,024 keys 3.02 / 2.90, 1 x 16,384 3.06 /
// 2.64, 16 x 192 0.61 / 0.53, 1 x 1,024 0.23 / 0.20; fp8 16 x 1,024 2.19 / 1.92, 1 x 16,384
// 2.13 / 1.96, 16 x 192 0.43 / 0.38, 1 x 1,024 0.15 / 0.15. The same bits (only the prefetches
// moved).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
// GCC 12 flags the _mm512_undefined_* pass-through inside unmasked intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// allowed: CpuBackend::decode_avx512() (the CPU has AVX-512 and NANOVLLM_CPU_ISA is not avx2).
bool use_avx512(const AttnArgs& a, bool allowed) {
  const int64_t g = a.group, hq = a.num_kv_heads * a.group;
  return allowed && (a.head_dim == 64 || a.head_dim == 128) && (g == 1 || g == 2 || g == 4 || g == 8) &&
         hq % 16 == 0;
}

inline void permute_head(float* dst, const float* src, int64_t d) {
  for (int64_t c = 0; c < d; c += 32)
    for (int k = 0; k < 16; ++k) {
      dst[c + k] = src[c + 2 * k];
      dst[c + 16 + k] = src[c + 2 * k + 1];
    }
}

inline void unpermute_head(float* dst, const float* src, int64_t d) {
  for (int64_t c = 0; c < d; c += 32)
    for (int k = 0; k < 16; ++k) {
      dst[c + 2 * k] = src[c + k];
      dst[c + 2 * k + 1] = src[c + 16 + k];
    }
}

// 32 cache elements as 2 x 16 f32 (times 1 / kLoadScale<T>). bf16: the even elements, then the
// odd ones (the permuted layout). fp8: elements 0-15, then 16-31 (the natural layout), each
// code converted as load8 does; kLoadScale is folded into q for the scores.
inline void load_pairs(const uint16_t* p, __m512& even, __m512& odd) {
  const __m512i x = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, x, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int(0xffff0000u))));
}

inline void load_pairs(const uint8_t* p, __m512& lo, __m512& hi) {
  const __m512i c = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(c, 7), _mm512_set1_epi16(int16_t(0xBFFF)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

// A head of q ([D] f32) into the layout load_pairs gives for T, times kLoadScale<T> (exact).
template <class T>
inline void layout_head(float* dst, const float* src, int64_t d) {
  if constexpr (sizeof(T) == 2) {
    permute_head(dst, src, d);
  } else {
    for (int64_t e = 0; e < d; ++e) dst[e] = src[e] * kLoadScale<T>;
  }
}

// The inverse of layout_head's order (not of its scale).
template <class T>
inline void unlayout_head(float* dst, const float* src, int64_t d) {
  if constexpr (sizeof(T) == 2)
    unpermute_head(dst, src, d);
  else
    std::copy(src, src + d, dst);
}

// One kv head's D elements (its slice of a token row) into L2.
template <int D, class T>
inline void prefetch_head_l2(const T* p) {
#pragma GCC unroll 16
  for (int b = 0; b < D * int(sizeof(T)); b += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p) + b, _MM_HINT_T1);
}

// Per 128-bit lane l: (sum of a's lane l, b's, c's, d's).
inline __m512 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512d t0d = _mm512_castps_pd(t0), t1d = _mm512_castps_pd(t1);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(t0d, t1d)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(t0d, t1d)));
}

// Lane 4g + k: the full sum of key 4g + k, from reduce4 of keys 4g..4g+3 in u_g.
inline __m512 reduce16(__m512 u0, __m512 u1, __m512 u2, __m512 u3) {
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Scores of one key for query heads [X0, X1) of a block of 16 (lanes): lane x = q_x . k_{x / G},
// the other lanes 0. Each lane's sum is the same whatever the range (the transposed reduction
// never mixes heads), so half a block (8 heads, X1 - X0 = 8) gives its heads' full-block bits.
// qp: [16][D] in T's layout, 64-byte aligned; kp: the key's row of the block's first kv head;
// pf: the same place in the row of a key to come, prefetched into L2 a kv head at a time beside
// this key's (nullptr: none).
template <int G, int D, class T, int X0 = 0, int X1 = 16>
inline __m512 score_key(const float* qp, const T* kp, const T* pf) {
  __m512 dot[16];
  #pragma GCC unroll 16
  for (int x = 0; x < 16; ++x) dot[x] = _mm512_setzero_ps();
  #pragma GCC unroll 16
  for (int g = X0 / G; g < X1 / G; ++g) {
    if (pf) prefetch_head_l2<D>(pf + g * D);
#pragma GCC unroll 16
    for (int i = 0; i < D; i += 32) {
      __m512 ke, ko;
      load_pairs(kp + g * D + i, ke, ko);
      #pragma GCC unroll 16
      for (int r = 0; r < G; ++r) {
        const int x = g * G + r;
        dot[x] = _mm512_fmadd_ps(_mm512_load_ps(qp + x * D + i), ke, dot[x]);
        dot[x] = _mm512_fmadd_ps(_mm512_load_ps(qp + x * D + i + 16), ko, dot[x]);
      }
    }
  }
  return reduce16(reduce4(dot[0], dot[1], dot[2], dot[3]), reduce4(dot[4], dot[5], dot[6], dot[7]),
                  reduce4(dot[8], dot[9], dot[10], dot[11]),
                  reduce4(dot[12], dot[13], dot[14], dot[15]));
}

// acc_x *= corr_x for every query head x (hq of them): a chunk's rescale before its P.V.
template <int D>
inline void pv_rescale(float* acc, const float* corr, int64_t hq) {
  for (int64_t x = 0; x < hq; ++x) {
    const __m512 c = _mm512_set1_ps(corr[x]);
    #pragma GCC unroll 16
    for (int i = 0; i < D; i += 16)
      _mm512_store_ps(acc + x * D + i, _mm512_mul_ps(_mm512_load_ps(acc + x * D + i), c));
  }
}

// acc_x += p_j[x] v_j[x / G] for the query heads x of kv heads [h0, h1), key j of the chunk: its
// value row read in address order (every kv head of the range in turn). The accumulators ([hq][D]
// in T's layout, 8 KiB for Qwen3) stay in L1 and are loaded and stored per key. p: [hq /
// 16][kDecodeChunk] [16]. pf: the value row of a key to come, prefetched into L2 a kv head at a
// time beside this key's (nullptr: none).
template <int G, int D, class T>
inline void pv_key(float* acc, const float* p, int64_t j, const T* v, int64_t h0, int64_t h1,
                   const T* pf) {
  for (int64_t h = h0; h < h1; ++h) {
    if (pf) prefetch_head_l2<D>(pf + h * D);
    __m512 vv[D / 16];
#pragma GCC unroll 16
    for (int w = 0; w < D / 16; w += 2) load_pairs(v + h * D + 16 * w, vv[w], vv[w + 1]);
#pragma GCC unroll 16
    for (int r = 0; r < G; ++r) {
      const int64_t x = h * G + r;
      const __m512 pr = _mm512_set1_ps(p[((x / 16) * kDecodeChunk + j) * 16 + x % 16]);
      float* o = acc + x * D;
#pragma GCC unroll 16
      for (int w = 0; w < D / 16; ++w)
        _mm512_store_ps(o + 16 * w, _mm512_fmadd_ps(pr, vv[w], _mm512_load_ps(o + 16 * w)));
    }
  }
}

// The token rows of the chunk at key c0 of the item (at most kDecodeChunk, none past it.k1).
template <class T>
struct ChunkRows {
  const T* k[kDecodeChunk];
  const T* v[kDecodeChunk];
  int64_t n = 0;
  void fill(const AttnArgs& a, const int32_t* table, const T* k_cache, const T* v_cache,
            const DecodeItem& it, int64_t c0) {
    n = std::max<int64_t>(0, std::min(kDecodeChunk, it.k1 - c0));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t row = token_row(a, table, c0 + j);
      k[j] = k_cache + row;
      v[j] = v_cache + row;
    }
  }
};

// Softmax states of every query head of item.seq over keys [k0, k1) (hq = Hkv * G, a multiple
// of 16): m, l: [hq]; acc, qp: [hq][D] in T's layout (load_pairs), 64-byte aligned (qp filled
// here; acc comes out divided by kLoadScale<T>). T: uint16_t for a bf16 cache, uint8_t for fp8.
// Per chunk of keys: scores key by key, each key's K row read in address order for all query
// heads; a vectorized online softmax over the lanes; then P.V over the chunk's V rows, in
// address order too. The P.V of chunk c runs key by key beside the scores of chunk c + 1 (their
// operations are independent), so that a thread reads two streams at once, V rows and the next
// K rows, where one at a time read 18-20 GB/s on 2 threads of a Xeon (family 6 model 167) whose
// probe reads 35: one sequential stream a thread is latency-bound there (a scratch probe: 20.7
// GB/s with one stream a thread, 25.0 with two). bench_attention --decode on it, three
// interleaved rounds, ms a layer before / after: bf16 16 x 1,024 keys 3.41-3.57 / 3.18-3.30,
// 1 x 16,384 3.42-3.52 / 3.19-3.31; fp8 16 x 1,024 2.24-2.34 / 2.01-2.05, 1 x 16,384 2.14-2.19 /
// 1.79-1.91. Every output sums the same terms in the same order as before (scores, then P.V,
// chunk by chunk): the same bits. The rows of the chunk after next (K) and of the next (V) are
// prefetched into L2 under the current pair, key j's beside key j's work (score_key, pv_key).
// The item's kv heads [h0, h1) hold query heads in whole units of 8 (halves of a 16-lane block;
// the lanes of the other half are computed as 0 and never stored for an output).
template <int G, int D, class T>
void decode_partition512(const AttnArgs& a, const DecodeItem& it, int64_t h0, int64_t h1, float* m,
                         float* l, float* acc, float* qp) {
  constexpr int64_t d = D;
  const int64_t hkv = a.num_kv_heads, hq = hkv * G, blocks = hq / 16;
  // Query heads [x0, x1) (multiples of 8), in blocks [b0, b1) of 16 (the end ones maybe half).
  const int64_t x0 = h0 * G, x1 = h1 * G, b0 = x0 / 16, b1 = (x1 + 15) / 16;
  const int32_t* table = a.block_tables + it.seq * a.max_num_blocks;
  std::fill(m + b0 * 16, m + b1 * 16, kNegInf);  // whole blocks: a half block's other lanes too
  std::fill(l + b0 * 16, l + b1 * 16, 0.0f);
  for (int64_t h = x0; h < x1; ++h)
    layout_head<T>(qp + h * d, a.q + it.seq * a.q_stride + h * a.q_head_stride, d);
  std::fill(acc + x0 * d, acc + x1 * d, 0.0f);
  const __m512 vscale = _mm512_set1_ps(a.scale);
  // Two score buffers (this chunk's probabilities, the next chunk's scores), each
  // [blocks][kDecodeChunk][16]; corr: [hq].
  constexpr int64_t kChunkFloats = kDecodeChunk * 16;
  alignas(64) float s_local[2 * kChunkFloats];
  alignas(64) float corr_local[16];
  std::vector<float> heap;
  float* sbuf[2] = {s_local, s_local + kChunkFloats};
  float* corr = corr_local;
  if (blocks > 1) {
    heap.resize(size_t(2 * blocks * kChunkFloats + hq + 16));
    float* base = heap.data() + (16 - (reinterpret_cast<uintptr_t>(heap.data()) / 4) % 16) % 16;
    sbuf[0] = base;
    sbuf[1] = base + blocks * kChunkFloats;
    corr = sbuf[1] + blocks * kChunkFloats;
  }
  const auto [k_cache, v_cache] = kv_arrays<T>(a);
  // The scores of key j (row krow) for the item's query heads, block by block of 16 (an end
  // block may be half of one), into s.
  auto score = [&](float* s, int64_t j, const T* krow, const T* pf) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* qb = qp + b * 16 * d;
      const T* kb = krow + b * (16 / G) * d;
      const T* pb = pf ? pf + b * (16 / G) * d : nullptr;
      const __m512 v = x0 > b * 16        ? score_key<G, D, T, 8, 16>(qb, kb, pb)
                       : x1 < b * 16 + 16 ? score_key<G, D, T, 0, 8>(qb, kb, pb)
                                          : score_key<G, D>(qb, kb, pb);
      _mm512_store_ps(s + (b * kDecodeChunk + j) * 16, _mm512_mul_ps(v, vscale));
    }
  };
  ChunkRows<T> rows[3];  // chunks c, c + 1, c + 2 (rotating)
  int cur = 0;
  rows[0].fill(a, table, k_cache, v_cache, it, it.k0);
  rows[1].fill(a, table, k_cache, v_cache, it, it.k0 + kDecodeChunk);
  for (int64_t j = 0; j < rows[0].n; ++j) {  // the first chunk's scores
    score(sbuf[0], j, rows[0].k[j], j < rows[1].n ? rows[1].k[j] : nullptr);
  }
  for (int64_t c0 = it.k0; c0 < it.k1; c0 += kDecodeChunk, cur = (cur + 1) % 3) {
    const ChunkRows<T>& now = rows[cur];
    const ChunkRows<T>& next = rows[(cur + 1) % 3];
    ChunkRows<T>& after = rows[(cur + 2) % 3];
    after.fill(a, table, k_cache, v_cache, it, c0 + 2 * kDecodeChunk);
    float* sc = sbuf[(c0 - it.k0) / kDecodeChunk % 2];
    float* sn = sbuf[((c0 - it.k0) / kDecodeChunk + 1) % 2];
    const int64_t n = now.n;
    for (int64_t b = b0; b < b1; ++b) {
      float* sb = sc + b * kChunkFloats;
      __m512 mx = _mm512_load_ps(sb);
      for (int64_t j = 1; j < n; ++j) mx = _mm512_max_ps(mx, _mm512_load_ps(sb + j * 16));
      const __m512 m_old = _mm512_load_ps(m + b * 16);
      const __m512 m_new = _mm512_max_ps(m_old, mx);
      const __m512 c = vec::exp16(_mm512_sub_ps(m_old, m_new));  // m_old = -inf: ~1e-38 times 0
      __m512 lv = _mm512_mul_ps(_mm512_load_ps(l + b * 16), c);
      for (int64_t j = 0; j < n; ++j) {
        const __m512 p = vec::exp16(_mm512_sub_ps(_mm512_load_ps(sb + j * 16), m_new));
        lv = _mm512_add_ps(lv, p);
        _mm512_store_ps(sb + j * 16, p);
      }
      _mm512_store_ps(m + b * 16, m_new);
      _mm512_store_ps(l + b * 16, lv);
      _mm512_store_ps(corr + b * 16, c);
    }
    pv_rescale<D>(acc + x0 * d, corr + x0, x1 - x0);
    for (int64_t j = 0; j < n; ++j) {
      pv_key<G, D>(acc, sc, j, now.v[j], h0, h1, j < next.n ? next.v[j] : nullptr);
      if (j < next.n) score(sn, j, next.k[j], j < after.n ? after.k[j] : nullptr);
    }
  }
}

template <int G, int D, class T>
void run_decode_item512(const AttnArgs& a, const DecodeItem& it, DecodeScratch& sc) {
  std::vector<float>& scratch = sc.f;
  const int64_t d = D, hq = a.num_kv_heads * G, hp = hq;
  scratch.resize(size_t(2 * hp + 2 * hp * d + d + 16));  // + 16: room to align to 64 bytes
  float* m = scratch.data() + (16 - (reinterpret_cast<uintptr_t>(scratch.data()) / 4) % 16) % 16;
  float* l = m + hp;
  float* acc = l + hp;  // hp is a multiple of 16: acc and qp stay 64-byte aligned
  float* qp = acc + hp * d;
  float* tmp = qp + hp * d;
  const int64_t h0 = it.h0, h1 = it.h1 > 0 ? it.h1 : a.num_kv_heads, x0 = h0 * G, x1 = h1 * G;
  decode_partition512<G, D, T>(a, it, h0, h1, m, l, acc, qp);
  if (it.partial) {  // this item's heads of the partial state
    std::copy(m + x0, m + x1, it.partial + x0);
    std::copy(l + x0, l + x1, it.partial + hq + x0);
    for (int64_t h = x0; h < x1; ++h) {
      float* o = it.partial + 2 * hq + h * d;
      unlayout_head<T>(o, acc + h * d, d);
      for (int64_t e = 0; e < d; ++e) o[e] *= kLoadScale<T>;  // exact
    }
    return;
  }
  for (int64_t h = x0; h < x1; ++h) {
    float* o = a.out + (it.seq * hq + h) * d;
    // (out_scale * 2^8) / l is out_scale / l times 2^8 exactly, so the output is acc's times
    // out_scale / l rounded once, as for bf16.
    const float inv = a.out_scale * kLoadScale<T> / l[h];
    unlayout_head<T>(tmp, acc + h * d, d);
    for (int64_t e = 0; e < d; ++e) o[e] = tmp[e] * inv;
  }
}

template <int D, class T>
void run_decode_item512_t(const AttnArgs& a, const DecodeItem& it, DecodeScratch& scratch) {
  switch (a.group) {
    case 1:
      return run_decode_item512<1, D, T>(a, it, scratch);
    case 2:
      return run_decode_item512<2, D, T>(a, it, scratch);
    case 4:
      return run_decode_item512<4, D, T>(a, it, scratch);
    default:
      return run_decode_item512<8, D, T>(a, it, scratch);
  }
}

template <int D>
void run_decode_item512_d(const AttnArgs& a, const DecodeItem& it, DecodeScratch& scratch) {
  if (a.k_fp8) return run_decode_item512_t<D, uint8_t>(a, it, scratch);
  run_decode_item512_t<D, uint16_t>(a, it, scratch);
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

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
    const float inv = a.out_scale / l;
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
    run_prefill_items(pool_, a, items, decode_avx512_);
    return;
  }
  // Each sequence is split into partitions at multiples of kPartitionKeys: a function of its
  // context length (and the window) alone, not of the batch or the thread count.
  const int64_t hq = a.num_kv_heads * a.group, state = hq * (a.head_dim + 2);
  std::vector<DecodeItem> items;
  std::vector<int64_t> seq_parts(static_cast<size_t>(num_seqs));
  int64_t partial_items = 0;
  for (int b = 0; b < num_seqs; ++b) {
    const int64_t ctx = context_len(hb, b);
    check_context(a, hb, ctx, 1, b);
    const int64_t first = first_key(a, ctx - 1), p0 = first / kPartitionKeys;
    const int64_t parts = std::max<int64_t>(1, (ctx + kPartitionKeys - 1) / kPartitionKeys - p0);
    seq_parts[size_t(b)] = parts;
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t k0 = std::max(first, (p0 + p) * kPartitionKeys);
      items.push_back({b, k0, std::min(ctx, (p0 + p + 1) * kPartitionKeys), p, nullptr});
    }
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
  const bool avx512 = use_avx512(a, decode_avx512_);
  // Fewer items than threads (one or a few sequences, short contexts): each item's kv heads are
  // split over items, so every thread has work; on the AVX-512 path in halves of a 16-lane block
  // (units of 8 query heads: Qwen3-0.6B's 16 make two, Llama's and Mistral's 32 four), on the
  // AVX2 path by kv heads. By wall time on an Intel Xeon (family 6 model 207, 2 threads, one
  // sequence, medians of 4-5 interleaved rounds of the fastest call, bench_attention --shapes):
  // bf16 64 keys 16 against 22.5 us a layer on one thread, 128 keys 29 against 42.5, 200 keys 44.5
  // against 63, 300 keys 61 against 99, 512 keys 101 against 161; fp8 12.5 / 15, 22 / 27, 32 /
  // 40. (Until then halves began at 256 keys, from Zen 4 figures taken by a call's own CPU time,
  // which misses the worker's share.)
  const int64_t threads = pool_.size();
  const int64_t units = avx512 ? hq / 8 : a.num_kv_heads;  // a unit's kv heads: hkv / units
  if (int64_t(items.size()) < threads && units > 1) {
    const int64_t splits =
        std::min(units, (threads + int64_t(items.size()) - 1) / int64_t(items.size()));
    std::vector<DecodeItem> split;
    for (const DecodeItem& it : items)
      for (int64_t s = 0; s < splits; ++s) {
        DecodeItem part = it;
        part.h0 = units * s / splits * (a.num_kv_heads / units);
        part.h1 = units * (s + 1) / splits * (a.num_kv_heads / units);
        split.push_back(part);
      }
    items = std::move(split);
  }
  run_dynamic(
      pool_, int64_t(items.size()), [] { return DecodeScratch(); },
      [&](int64_t i, DecodeScratch& sc) {
        const DecodeItem& it = items[size_t(i)];
        if (avx512)
          return a.head_dim == 64 ? run_decode_item512_d<64>(a, it, sc)
                                  : run_decode_item512_d<128>(a, it, sc);
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
