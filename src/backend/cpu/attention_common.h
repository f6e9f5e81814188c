#pragma once
// Internals shared by the paged attention kernels over the bf16 KV cache: attention_prefill.cpp
// (tiled flash attention), attention_decode.cpp (flash-decoding) and kv_cache.cpp (store_kv).
// Not part of the backend interface.
//
// Items go to the pool's threads dynamically, most expensive first; how the work is split
// depends only on the batch shape, never on the thread count, and each item's arithmetic does
// not depend on which thread runs it, so results are identical for any thread count.
//
// Everything here is compiled for AVX2+FMA (push_options below); the .cpp files that include this
// header compile their own kernels for the same target.
#include <atomic>
#include <cstdint>
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
  const uint16_t* k_cache;  // [num_blocks, block_size, Hkv, D] bf16
  const uint16_t* v_cache;
  int64_t num_blocks, block_size, num_kv_heads, head_dim, group;  // group = Hq / Hkv
  const int32_t* block_tables;                                    // [num_seqs, max_num_blocks]
  int64_t max_num_blocks;
  float scale;
};

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
// Defined in attention_prefill.cpp.
void run_prefill_items(ThreadPool& pool, const AttnArgs& a, std::vector<PrefillItem>& items);

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

inline const LayerKVCache& check_cache(const LayerKVCache& cache) {
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
