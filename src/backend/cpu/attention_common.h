#pragma once
// Internals shared by the paged attention kernels over the bf16 or fp8 KV cache: attention_prefill.cpp
// (tiled flash attention), attention_decode.cpp (flash-decoding) and kv_cache.cpp (store_kv).
// Not part of the backend interface.
//
// Items go to the pool's threads dynamically, most expensive first; how the work is split
// depends only on the batch shape, never on the thread count, and each item's arithmetic does
// not depend on which thread runs it, so results are identical for any thread count.
//
// fp8 (E4M3) caches: the kernels see code values, converted exactly (fp8 -> f32 or bf16 is
// lossless) as rows are read; k_scale is folded into the score scale and v_scale into the output
// normalization, so out = softmax(scale * q . (k_code * k_scale)) (v_code * v_scale) up to f32
// rounding. With a bf16 cache both factors are 1 and the arithmetic is unchanged.
//
// Everything here is compiled for AVX2+FMA (push_options below); the .cpp files that include this
// header compile their own kernels for the same target.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_avx2.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace nanovllm::cpu::attention_detail {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// What every item of one attention call shares.
struct AttnArgs {
  const float* q;  // [T, Hq, D], token stride q_stride, head stride q_head_stride
  int64_t q_stride, q_head_stride;
  float* out;               // [T, Hq, D] contiguous
  const uint16_t* k_cache;  // [num_blocks, block_size, Hkv, D] bf16 (nullptr for fp8)
  const uint16_t* v_cache;
  const uint8_t* k_fp8;     // [num_blocks, block_size, Hkv, D] E4M3 codes (nullptr for bf16)
  const uint8_t* v_fp8;
  const char* k_bytes;      // whichever of the two is set, for prefetching (prefill)
  const char* v_bytes;
  int64_t elem_bytes;       // 2 (bf16) or 1 (fp8)
  float out_scale;          // multiplies the output: v_scale for fp8, 1 for bf16
  int64_t num_blocks, block_size, num_kv_heads, head_dim, group;  // group = Hq / Hkv
  const int32_t* block_tables;                                    // [num_seqs, max_num_blocks]
  int64_t max_num_blocks;
  float scale;
  int64_t window;  // LayerKVCache::sliding_window: the query at p sees keys (p - window, p]; 0: all
};

// The first key the query at position pos sees: its sliding window's start, else key 0.
inline int64_t first_key(const AttnArgs& a, int64_t pos) {
  return a.window > 0 ? std::max<int64_t>(0, pos + 1 - a.window) : 0;
}

// One prefill work item: every query head of kv head `kv_head`'s GQA group for token rows
// [t0, t1) of one sequence. attention_decode uses it too, for large GQA groups.
struct PrefillItem {
  int64_t seq;  // row of block_tables
  int64_t kv_head;
  int64_t q_begin;    // first token row of the sequence in q
  int64_t t0, t1;     // token rows [t0, t1) of this item
  int64_t first_pos;  // position of token row q_begin (= context_len - seqlen_q)
  int64_t cost;       // rows * keys, for ordering
};

// Runs the prefill kernel over `items` on the pool, most expensive first (sorts `items`).
// Defined in attention_prefill.cpp. zmm: each item on AVX-512 (run_prefill_item_avx512; the CPU
// must have it; the same bits as without).
void run_prefill_items(ThreadPool& pool, const AttnArgs& a, std::vector<PrefillItem>& items,
                       bool zmm);
// The same on AVX-512 BF16 (head_dim % 16 == 0). Defined in attention_prefill_bf16.cpp.
void run_prefill_items_bf16(ThreadPool& pool, const AttnArgs& a, std::vector<PrefillItem>& items);

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

// 8 E4M3 codes -> 8 f32, exactly (runtime/fp8.h's fp8_e4m3_to_float, without touching
// denormal floats): normals move their exponent and mantissa bits into place and rebias
// (+120 << 23), subnormals are m * 2^-9, and codes 0x7F / 0xFF are NaN.
inline __m256 fp8x8_to_f32(const uint8_t* p) {
  int64_t raw;
  __builtin_memcpy(&raw, p, 8);
  const __m256i c = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(raw));
  const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
  const __m256 normal = _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(1.0f / 512));
  __m256 v = _mm256_blendv_ps(normal, sub,
                              _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
  v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                       _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f))));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

inline void fp8_row_to_f32(float* dst, const uint8_t* src, int64_t d) {  // d % 8 == 0
  for (int64_t i = 0; i < d; i += 8) _mm256_storeu_ps(dst + i, fp8x8_to_f32(src + i));
}

// 16 E4M3 codes -> 16 bf16, exactly, with integer ops: a normal magnitude's bits move into
// place and rebias ((mag << 4) + (120 << 7)); subnormals (mag < 8) come from an 8-entry table
// (pshufb: low bytes at 0..7, high bytes at 8..15); 0x7F is NaN; the sign moves to bit 15.
inline __m256i fp8x16_to_bf16(const uint8_t* p) {
  auto b = [](int x) { return static_cast<char>(x); };
  const __m256i tab = _mm256_setr_epi8(
      0, 0, b(0x80), b(0xC0), 0, 0x20, 0x40, 0x60, 0, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C,
      0, 0, b(0x80), b(0xC0), 0, 0x20, 0x40, 0x60, 0, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C);
  const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi16(0x7f));
  const __m256i normal = _mm256_add_epi16(_mm256_slli_epi16(mag, 4), _mm256_set1_epi16(120 << 7));
  const __m256i idx = _mm256_or_si256(mag, _mm256_slli_epi16(_mm256_add_epi16(mag, _mm256_set1_epi16(8)), 8));
  const __m256i sub = _mm256_shuffle_epi8(tab, idx);  // meaningful where mag < 8
  __m256i v = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi16(_mm256_set1_epi16(8), mag));
  v = _mm256_blendv_epi8(v, _mm256_set1_epi16(0x7FC0), _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f)));
  return _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x80)), 8));
}

// fp8 -> bf16 is exact (E4M3's values all fit bf16), so the bf16 kernels run on the result.
inline void fp8_row_to_bf16(uint16_t* dst, const uint8_t* src, int64_t n) {  // n % 8 == 0
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), fp8x16_to_bf16(src + i));
  for (; i < n; i += 8) vec::store_bf16(dst + i, fp8x8_to_f32(src + i));
}

// Shared by both prefill kernels (attention_prefill.cpp, attention_prefill_bf16.cpp): an item's
// row r (r < rows) is token t0 + r / group, query head kv_head * group + r % group, and sees keys
// [first, limit); rows past `rows` (a kernel's padding to its vector width) repeat the last row.
// Both bounds grow with r.
struct PrefillRow {
  const float* q;  // [D] of q
  float first;     // the first key the row sees (first_key), as a float for vector compares
  float limit;     // keys below it, as a float
};
inline PrefillRow prefill_row(const AttnArgs& a, const PrefillItem& it, int64_t rows, int64_t r) {
  const int64_t rr = std::min(r, rows - 1);
  const int64_t t = it.t0 + rr / a.group, h = it.kv_head * a.group + rr % a.group;
  const int64_t pos = it.first_pos + (t - it.q_begin);
  return {a.q + t * a.q_stride + h * a.q_head_stride, float(first_key(a, pos)), float(pos + 1)};
}

inline constexpr int64_t kPrefillTile = 48;  // keys per tile of the f32 prefill kernel

// The f32 prefill kernel's per-thread buffers; rp = the item's row count padded to the vector's
// lanes (the row stride of the ^T arrays).
struct PrefillScratch {
  std::vector<float> qt;                   // [D][rp]      Q^T, pre-multiplied by the scale
  std::vector<float> kf;                   // [tile][D]    the tile's keys, f32
  std::vector<float> vf;                   // [tile][D]    the tile's values, f32
  std::vector<float> st;                   // [tile][rp]   S^T, then P^T
  std::vector<float> ot;                   // [D][rp]      unnormalized O^T
  std::vector<float> m, l, corr, lim, lo;  // [rp] running max, sum, rescale, key bounds
};

// One item of that kernel on 16-row zmm vectors where the CPU has AVX-512, with the ymm kernel's
// bits (attention_prefill_avx512.cpp).
void run_prefill_item_avx512(const AttnArgs& a, const PrefillItem& it, PrefillScratch& sc);

// Requests kv head `kv_head`'s K and V rows of keys [k0, k1) into L2 (keys in unallocated blocks
// are skipped here and checked when they are read).
inline void prefetch_head_keys(const AttnArgs& a, const int32_t* table, int64_t kv_head,
                               int64_t k0, int64_t k1) {
  const int64_t d = a.head_dim, row_bytes = d * a.elem_bytes;
  for (int64_t key = k0; key < k1; ++key) {
    const int64_t block = table[key / a.block_size];
    if (block < 0 || block >= a.num_blocks) continue;
    const int64_t off = ((block * a.block_size + key % a.block_size) * a.num_kv_heads + kv_head) * d;
    for (int64_t b = 0; b < row_bytes; b += 64) {
      _mm_prefetch(a.k_bytes + off * a.elem_bytes + b, _MM_HINT_T1);
      _mm_prefetch(a.v_bytes + off * a.elem_bytes + b, _MM_HINT_T1);
    }
  }
}

// out[row r] = ot[:, r] * out_scale / l[r] for the item's rows r < rows (ot: [D, rp], l: [rp]).
inline void write_prefill_rows(const AttnArgs& a, const PrefillItem& it, int64_t rows, int64_t rp,
                               const float* ot, const float* l) {
  const int64_t d = a.head_dim, g = a.group;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = it.t0 + r / g, h = it.kv_head * g + r % g;
    float* o = a.out + (t * a.num_kv_heads * g + h) * d;
    const float inv = a.out_scale / l[r];
    for (int64_t e = 0; e < d; ++e) o[e] = ot[e * rp + r] * inv;
  }
}

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
    pool.run_shared([&](int) { work(); });
  }
}

inline const LayerKVCache& check_cache(const LayerKVCache& cache) {
  const Tensor& k = cache.k;
  const Tensor& v = cache.v;
  NV_CHECK(k.ndim == 4 && (k.dtype == DType::BF16 || k.dtype == DType::F8E4M3) &&
               k.is_contiguous() && v.ndim == 4 && v.dtype == k.dtype && v.is_contiguous(),
           "KV cache k {} v {}: expected contiguous bf16 or fp8 [num_blocks, block_size, Hkv, D]",
           k.describe(), v.describe());
  NV_CHECK(k.dtype == DType::BF16 || (cache.k_scale > 0.0f && cache.v_scale > 0.0f),
           "fp8 KV cache scales k {} v {}", cache.k_scale, cache.v_scale);
  for (int d = 0; d < 4; ++d)
    NV_CHECK(k.shape[d] == v.shape[d], "KV cache k {} v {}", k.describe(), v.describe());
  return cache;
}

inline AttnArgs make_args(Tensor out, Tensor q, const LayerKVCache& cache,
                          const ForwardBatch& batch, float scale) {
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
  const bool fp8 = cache.k.dtype == DType::F8E4M3;
  a.k_cache = fp8 ? nullptr : cache.k.ptr<const uint16_t>();
  a.v_cache = fp8 ? nullptr : cache.v.ptr<const uint16_t>();
  a.k_fp8 = fp8 ? cache.k.ptr<const uint8_t>() : nullptr;
  a.v_fp8 = fp8 ? cache.v.ptr<const uint8_t>() : nullptr;
  a.k_bytes = cache.k.ptr<const char>();
  a.v_bytes = cache.v.ptr<const char>();
  a.elem_bytes = fp8 ? 1 : 2;
  a.out_scale = fp8 ? cache.v_scale : 1.0f;
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
  a.scale = cache.k.dtype == DType::F8E4M3 ? scale * cache.k_scale : scale;
  NV_CHECK(cache.sliding_window >= 0, "attention: sliding window {} < 0", cache.sliding_window);
  a.window = cache.sliding_window;
  return a;
}

// Tokens in the KV cache of seq b once this step's are stored.
inline int64_t context_len(const HostBatch& hb, int b) {
  if (!hb.context_lens.empty()) return hb.context_lens[size_t(b)];
  NV_CHECK(hb.cu_seqlens_k.size() == size_t(hb.num_seqs()) + 1, "no context_lens nor cu_seqlens_k");
  return hb.cu_seqlens_k[size_t(b) + 1] - hb.cu_seqlens_k[size_t(b)];
}

inline void check_context(const AttnArgs& a, const HostBatch& hb, int64_t ctx, int64_t seqlen_q,
                          int b) {
  NV_CHECK(int64_t(hb.block_tables.size()) >= (b + 1) * a.max_num_blocks,
           "block_tables holds {} entries, seq {} needs {} per row", hb.block_tables.size(), b,
           a.max_num_blocks);
  NV_CHECK(seqlen_q >= 1 && ctx >= seqlen_q, "seq {}: {} new tokens in a context of {}", b,
           seqlen_q, ctx);
  NV_CHECK(ctx <= a.max_num_blocks * a.block_size, "seq {}: context {} exceeds {} blocks of {}", b,
           ctx, a.max_num_blocks, a.block_size);
}

}  // namespace nanovllm::cpu::attention_detail

#pragma GCC pop_options
