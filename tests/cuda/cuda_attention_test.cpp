// The CUDA paged-KV ops against the fp32 reference: store_kv (slot -1 skipped), the fused
// q/k-norm + RoPE + store_kv (equal to the separate ops bit for bit), prefill attention (varlen,
// prefix-cached context, GQA, odd lengths) and split-K decode attention (multi-partition
// contexts, batch invariance), each over a bf16 and an fp8 (E4M3) cache, also under Mistral's
// sliding window (LayerKVCache::sliding_window); under fp8 the reference
// reads K/V rounded as the cache stores them (fp8(x / scale) * scale) and store_kv must write
// exactly runtime/fp8.h's codes. Unused cache blocks and padded block-table columns hold NaN, so
// any read outside a sequence's keys shows. Needs a GPU (label cuda).
#include <algorithm>
#include <array>
#include <numeric>
#include <optional>

#include "cuda/cuda_fixture.h"
#include "runtime/forward_batch.h"
#include "runtime/fp8.h"

namespace nanovllm {
namespace {

using ref::Vec;
using test::expect_close_scaled;
using test::random_bf16;

struct SeqSpec {
  int64_t seqlen_q;  // new tokens
  int64_t context;   // cached + new
};

class CudaAttention : public test::CudaTest {
 protected:
  // Paged case: sequences over shuffled blocks (3 spare blocks and one -1 column of padding),
  // the unused blocks NaN; host K/V per sequence for the reference; q inside a qkv buffer.
  struct Case {
    int64_t hq, hkv, d, bs, num_blocks = 0, tokens = 0;
    std::vector<SeqSpec> seqs;
    std::vector<Vec> k, v;                // per seq [context, hkv, d]
    Vec qkv;                              // [T, (hq + 2 hkv) d]
    std::optional<ref::Fp8KvScales> fp8;  // an fp8 cache with these scales, else bf16
    HostBatch host;
    ForwardBatch batch;
    LayerKVCache cache;
    Tensor qkv_t;
    Tensor q() const { return qkv_t.slice_last(0, hq * d).unflatten_last(hq); }
    Vec reference(float scale) const {
      Vec out;
      int64_t row = 0;
      const int64_t width = (hq + 2 * hkv) * d;
      for (size_t b = 0; b < seqs.size(); ++b) {
        Vec qb;
        for (int64_t i = 0; i < seqs[b].seqlen_q; ++i, ++row)
          qb.insert(qb.end(), qkv.begin() + row * width, qkv.begin() + row * width + hq * d);
        Vec o = ref::attention(qb, k[b], v[b], seqs[b].seqlen_q, seqs[b].context, hq, hkv, d, scale,
                               fp8 ? &*fp8 : nullptr, cache.sliding_window);
        out.insert(out.end(), o.begin(), o.end());
      }
      return out;
    }
  };

  // fp8: an E4M3 cache holding fp8(x / scale) codes (NaN codes in unused blocks).
  std::unique_ptr<Case> make_case(int64_t hq, int64_t hkv, int64_t d, int64_t bs,
                                  std::vector<SeqSpec> specs, bool prefill,
                                  std::optional<ref::Fp8KvScales> fp8 = std::nullopt) {
    auto c = std::make_unique<Case>();
    c->hq = hq, c->hkv = hkv, c->d = d, c->bs = bs, c->seqs = std::move(specs), c->fp8 = fp8;
    int64_t max_blocks = 0;
    for (const auto& s : c->seqs) {
      c->num_blocks += (s.context + bs - 1) / bs;
      max_blocks = std::max(max_blocks, (s.context + bs - 1) / bs);
      c->tokens += s.seqlen_q;
    }
    c->num_blocks += 3;
    std::vector<int32_t> perm(static_cast<size_t>(c->num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const size_t elems = size_t(c->num_blocks * bs * hkv * d);
    std::vector<uint16_t> kc(elems, 0xffff), vc(elems, 0xffff);  // NaN
    std::vector<uint8_t> k8(elems, 0x7f), v8(elems, 0x7f);       // NaN
    HostBatch& h = c->host;
    h.is_prefill = prefill;
    h.max_num_blocks = int(max_blocks + 1);
    h.cu_seqlens_q = {0};
    h.cu_seqlens_k = {0};
    size_t next = 0;
    for (const auto& s : c->seqs) {
      std::vector<int32_t> table(size_t(h.max_num_blocks), -1);
      for (int64_t b = 0; b < (s.context + bs - 1) / bs; ++b) table[size_t(b)] = perm[next++];
      h.block_tables.insert(h.block_tables.end(), table.begin(), table.end());
      Vec ks = random_bf16(rng, size_t(s.context * hkv * d)),
          vs = random_bf16(rng, size_t(s.context * hkv * d));
      for (int64_t j = 0; j < s.context; ++j) {
        const int64_t slot = table[size_t(j / bs)] * bs + j % bs;
        for (int64_t e = 0; e < hkv * d; ++e) {
          const size_t at = size_t(slot * hkv * d + e), from = size_t(j * hkv * d + e);
          kc[at] = f32_to_bf16(ks[from]);
          vc[at] = f32_to_bf16(vs[from]);
          if (fp8) {
            k8[at] = float_to_fp8_e4m3(ks[from] / fp8->k_scale);
            v8[at] = float_to_fp8_e4m3(vs[from] / fp8->v_scale);
          }
        }
        if (j >= s.context - s.seqlen_q) {
          h.slot_mapping.push_back(int32_t(slot));
          h.positions.push_back(int32_t(j));
        }
      }
      c->k.push_back(ks);
      c->v.push_back(vs);
      h.cu_seqlens_q.push_back(h.cu_seqlens_q.back() + int32_t(s.seqlen_q));
      h.cu_seqlens_k.push_back(h.cu_seqlens_k.back() + int32_t(s.context));
      h.context_lens.push_back(int32_t(s.context));
      h.last_token_indices.push_back(h.cu_seqlens_q.back() - 1);
      h.max_seqlen_q = std::max<int>(h.max_seqlen_q, int(s.seqlen_q));
      h.max_seqlen_k = std::max<int>(h.max_seqlen_k, int(s.context));
    }
    const int64_t B = int64_t(c->seqs.size());
    ForwardBatch& fb = c->batch;
    fb.host = &h;
    fb.is_prefill = prefill;
    fb.num_seqs = int(B);
    fb.num_tokens = int(c->tokens);
    fb.max_seqlen_q = h.max_seqlen_q;
    fb.max_seqlen_k = h.max_seqlen_k;
    fb.slot_mapping = ints(h.slot_mapping, DType::I32);
    fb.positions = ints(h.positions, DType::I32);
    fb.cu_seqlens_q = ints(h.cu_seqlens_q, DType::I32);
    fb.context_lens = ints(h.context_lens, DType::I32);
    Tensor bt = alloc(DType::I32, {B, h.max_num_blocks});
    be->upload(bt, h.block_tables.data());
    fb.block_tables = bt;
    const std::initializer_list<int64_t> shape = {c->num_blocks, bs, hkv, d};
    const DType dt = fp8 ? DType::F8E4M3 : DType::BF16;
    c->cache.k = alloc(dt, shape);
    c->cache.v = alloc(dt, shape);
    be->upload(c->cache.k, fp8 ? static_cast<const void*>(k8.data()) : kc.data());
    be->upload(c->cache.v, fp8 ? static_cast<const void*>(v8.data()) : vc.data());
    if (fp8) {
      c->cache.k_scale = fp8->k_scale;
      c->cache.v_scale = fp8->v_scale;
    }
    c->qkv = random_bf16(rng, size_t(c->tokens * (hq + 2 * hkv) * d), -3.0f, 3.0f);
    c->qkv_t = bf16(c->qkv, {c->tokens, (hq + 2 * hkv) * d});
    return c;
  }
};

// The caches each attention test runs over: bf16, and fp8 with unit and uneven scales.
const std::optional<ref::Fp8KvScales> kCaches[] = {std::nullopt, ref::Fp8KvScales{1.0f, 1.0f},
                                                   ref::Fp8KvScales{0.25f, 3.0f}};

std::string cache_name(const std::optional<ref::Fp8KvScales>& fp8) {
  if (!fp8) return "bf16 cache";
  return "fp8 cache (k_scale " + std::to_string(fp8->k_scale) + ", v_scale " +
         std::to_string(fp8->v_scale) + ")";
}

TEST_F(CudaAttention, Prefill) {
  struct Shape {
    int64_t hq, hkv, d, bs;
  };
  for (const auto& fp8 : kCaches) {
    SCOPED_TRACE(cache_name(fp8));
    // Head dims up to 128 run on the tensor cores (GQA 1 to 8, 3 included: a CTA's 64 rows
    // then hold 21 tokens and one idle row), 256 on the CUDA cores.
    for (Shape s : {Shape{4, 2, 32, 16}, Shape{4, 4, 16, 16}, Shape{16, 8, 128, 256},
                    Shape{6, 2, 64, 16}, Shape{8, 1, 128, 32}, Shape{12, 4, 64, 16},
                    Shape{8, 8, 256, 32}}) {
      auto c = make_case(s.hq, s.hkv, s.d, s.bs, {{1, 1}, {37, 37}, {5, 70}, {90, 200}, {3, 3}},
                         /*prefill=*/true, fp8);
      const float scale = 1.0f / std::sqrt(float(s.d));
      Tensor out = poisoned(DType::BF16, {c->tokens, s.hq, s.d});
      be->attention_prefill(out, c->q(), c->cache, c->batch, scale);
      expect_close_scaled(get(out), c->reference(scale), 2e-2, "attention_prefill");
    }
  }
}

TEST_F(CudaAttention, DecodeSplitKAndBatchInvariance) {
  struct Shape {
    int64_t hq, hkv, d, bs;
  };
  for (const auto& fp8 : kCaches) {
    SCOPED_TRACE(cache_name(fp8));
    for (Shape s : {Shape{4, 2, 32, 16}, Shape{4, 2, 16, 16}, Shape{16, 8, 128, 256},
                    Shape{12, 4, 64, 16}, Shape{8, 8, 256, 32}}) {
      std::vector<SeqSpec> specs;
      for (int64_t ctx : {1, 255, 256, 257, 700, 33, 1100}) specs.push_back({1, ctx});
      auto c = make_case(s.hq, s.hkv, s.d, s.bs, specs, /*prefill=*/false, fp8);
      const float scale = 1.0f / std::sqrt(float(s.d));
      Tensor out = poisoned(DType::BF16, {c->tokens, s.hq, s.d});
      be->attention_decode(out, c->q(), c->cache, c->batch, scale);
      Vec all = get(out);
      expect_close_scaled(all, c->reference(scale), 2e-2, "attention_decode");
      // Again: the per-(sequence, kv head) counters of the partition merge were left zero.
      Tensor again = poisoned(DType::BF16, {c->tokens, s.hq, s.d});
      be->attention_decode(again, c->q(), c->cache, c->batch, scale);
      const Vec repeat = get(again);
      EXPECT_TRUE(std::equal(repeat.begin(), repeat.end(), all.begin()))
          << "a second decode launch gave other bits";

      // Sequence 4 (700 keys, 3 partitions) alone: the same bits as inside the batch.
      ForwardBatch one = c->batch;
      one.num_seqs = 1;
      one.num_tokens = 1;
      const int64_t w = c->host.max_num_blocks, row_elems = s.hq * s.d;
      one.context_lens = c->batch.context_lens.slice_rows(4, 5);
      one.block_tables = c->batch.block_tables.slice_rows(4, 5);
      Tensor q1 = c->q().slice_rows(4, 5);
      Tensor out1 = poisoned(DType::BF16, {1, s.hq, s.d});
      be->attention_decode(out1, q1, c->cache, one, scale);
      Vec alone = get(out1);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + 4 * row_elems))
          << "decode output of a sequence depends on its batch (table width " << w << ")";
    }
  }
}

// Mistral's sliding window (the query at p attends to keys (p - W, p]) against the windowed
// reference: windows of 1, of 40 (under a key tile, crossing tile boundaries as the rows move,
// not a multiple of the block size) and past every context (which must give the unwindowed
// bits); chunked prefill (seqlen_q < context) included, so whole tiles below a window are
// skipped and rows mask inside one.
TEST_F(CudaAttention, PrefillSlidingWindow) {
  struct Shape {
    int64_t hq, hkv, d, bs;
  };
  for (const auto& fp8 : kCaches) {
    SCOPED_TRACE(cache_name(fp8));
    // 64 and 128 on the tensor cores (GQA 2 and 3), 256 on the CUDA cores.
    for (Shape s : {Shape{4, 2, 64, 16}, Shape{12, 4, 128, 32}, Shape{8, 8, 256, 32}}) {
      auto c = make_case(s.hq, s.hkv, s.d, s.bs, {{1, 1}, {37, 37}, {5, 70}, {90, 200}, {3, 150}},
                         /*prefill=*/true, fp8);
      const float scale = 1.0f / std::sqrt(float(s.d));
      Tensor plain = poisoned(DType::BF16, {c->tokens, s.hq, s.d});
      be->attention_prefill(plain, c->q(), c->cache, c->batch, scale);
      const Vec unwindowed = get(plain);
      for (int64_t window : {1, 40, 1000}) {
        SCOPED_TRACE("window " + std::to_string(window));
        c->cache.sliding_window = window;
        Tensor out = poisoned(DType::BF16, {c->tokens, s.hq, s.d});
        be->attention_prefill(out, c->q(), c->cache, c->batch, scale);
        const Vec got = get(out);
        expect_close_scaled(got, c->reference(scale), 2e-2, "attention_prefill (window)");
        if (window >= 200) {
          EXPECT_TRUE(got == unwindowed) << "a window past the context changed";
        }
      }
    }
  }
}

// Decode under a sliding window: windows inside one partition, across a partition boundary (the
// split path, its first partition starting mid-partition and mid-block) and past the context
// (the unwindowed bits); a windowed sequence alone gives the bits it gives in the batch.
TEST_F(CudaAttention, DecodeSlidingWindow) {
  struct Shape {
    int64_t hq, hkv, d, bs;
  };
  for (const auto& fp8 : kCaches) {
    SCOPED_TRACE(cache_name(fp8));
    for (Shape s : {Shape{4, 2, 32, 16}, Shape{16, 8, 128, 256}, Shape{12, 4, 64, 16},
                    Shape{8, 8, 256, 32}}) {
      std::vector<SeqSpec> specs;
      for (int64_t ctx : {1, 255, 256, 257, 700, 33, 1100}) specs.push_back({1, ctx});
      auto c = make_case(s.hq, s.hkv, s.d, s.bs, specs, /*prefill=*/false, fp8);
      const float scale = 1.0f / std::sqrt(float(s.d));
      Tensor plain = poisoned(DType::BF16, {c->tokens, s.hq, s.d});
      be->attention_decode(plain, c->q(), c->cache, c->batch, scale);
      const Vec unwindowed = get(plain);
      for (int64_t window : {1, 5, 200, 300, 513, 5000}) {
        SCOPED_TRACE("window " + std::to_string(window));
        c->cache.sliding_window = window;
        Tensor out = poisoned(DType::BF16, {c->tokens, s.hq, s.d});
        be->attention_decode(out, c->q(), c->cache, c->batch, scale);
        const Vec all = get(out);
        expect_close_scaled(all, c->reference(scale), 2e-2, "attention_decode (window)");
        if (window >= 1100) {
          EXPECT_TRUE(all == unwindowed) << "a window past the context changed";
        }

        // Sequence 6 (1100 keys; 2 or 3 partitions under windows 200 to 513) alone.
        ForwardBatch one = c->batch;
        one.num_seqs = 1;
        one.num_tokens = 1;
        one.context_lens = c->batch.context_lens.slice_rows(6, 7);
        one.block_tables = c->batch.block_tables.slice_rows(6, 7);
        Tensor out1 = poisoned(DType::BF16, {1, s.hq, s.d});
        be->attention_decode(out1, c->q().slice_rows(6, 7), c->cache, one, scale);
        const Vec alone = get(out1);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + 6 * s.hq * s.d))
            << "windowed decode output of a sequence depends on its batch";
      }
    }
  }
}

// store_kv writes each stored slot exactly (bf16: the value; fp8: runtime/fp8.h's code of
// value / scale) and nothing at slot -1.
TEST_F(CudaAttention, StoreKvSkipsSlotMinusOne) {
  for (const auto& fp8 : kCaches) {
    SCOPED_TRACE(cache_name(fp8));
    const int64_t hkv = 2, d = 32, bs = 16, blocks = 4, T = 6;
    const int64_t width = (4 + 2 * hkv) * d;
    // Up to 150: past fp8's 448 * k_scale of the 0.25 scale, so saturation is checked too.
    Vec qkv = random_bf16(rng, size_t(T * width), -150.0f, 150.0f);
    Tensor buf = bf16(qkv, {T, width});
    Tensor k = buf.slice_last(4 * d, (4 + hkv) * d).unflatten_last(hkv);
    Tensor v = buf.slice_last((4 + hkv) * d, width).unflatten_last(hkv);
    std::vector<int32_t> slots = {5, -1, 63, 0, -1, 17};
    HostBatch h;
    h.slot_mapping = slots;
    ForwardBatch fb;
    fb.host = &h;
    fb.num_tokens = int(T);
    fb.slot_mapping = ints(slots, DType::I32);
    const DType dt = fp8 ? DType::F8E4M3 : DType::BF16;
    LayerKVCache cache{poisoned(dt, {blocks, bs, hkv, d}), poisoned(dt, {blocks, bs, hkv, d})};
    if (fp8) cache.k_scale = fp8->k_scale, cache.v_scale = fp8->v_scale;
    be->store_kv(k, v, cache, fb);
    // Each element as stored: a float (bf16) or a code (fp8); untouched ones are all ones.
    const auto stored = [&](const Tensor& t) {
      std::vector<uint16_t> bits(size_t(t.numel()));
      if (fp8) {
        std::vector<uint8_t> codes(bits.size());
        be->download(codes.data(), t);
        std::copy(codes.begin(), codes.end(), bits.begin());
      } else {
        be->download(bits.data(), t);
      }
      return bits;
    };
    const auto want = [&](float x, float scale) -> uint16_t {
      return fp8 ? float_to_fp8_e4m3(x / scale) : f32_to_bf16(x);
    };
    const std::vector<uint16_t> kc = stored(cache.k), vc = stored(cache.v);
    const uint16_t untouched = fp8 ? 0xff : 0xffff;
    std::vector<bool> written(size_t(blocks * bs), false);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t slot = slots[size_t(t)];
      if (slot < 0) continue;
      written[size_t(slot)] = true;
      for (int64_t e = 0; e < hkv * d; ++e) {
        ASSERT_EQ(kc[size_t(slot * hkv * d + e)],
                  want(qkv[size_t(t * width + 4 * d + e)], cache.k_scale))
            << "k token " << t << " element " << e;
        ASSERT_EQ(vc[size_t(slot * hkv * d + e)],
                  want(qkv[size_t(t * width + (4 + hkv) * d + e)], cache.v_scale))
            << "v token " << t << " element " << e;
      }
    }
    for (int64_t slot = 0; slot < blocks * bs; ++slot) {
      if (written[size_t(slot)]) continue;
      for (int64_t e = 0; e < hkv * d; ++e) {
        ASSERT_EQ(kc[size_t(slot * hkv * d + e)], untouched) << "slot " << slot << " written";
        ASSERT_EQ(vc[size_t(slot * hkv * d + e)], untouched) << "slot " << slot << " written";
      }
    }
  }
}

// The fused prologue equals rms_norm + rope + store_kv bit for bit (q, k in place and the cache),
// into a bf16 and an fp8 cache.
TEST_F(CudaAttention, FusedQkNormRopeStoreEqualsSeparateOps) {
  for (const auto& fp8 : kCaches) {
    SCOPED_TRACE(cache_name(fp8));
    for (bool with_norm : {true, false}) {
      auto a = make_case(4, 2, 32, 16, {{5, 9}, {1, 40}, {3, 3}}, true, fp8);
      const int64_t d = 32, max_pos = 64;
      Vec cs = ref::rope_cos_sin(max_pos, d, 1e6);
      Tensor cos_sin = f32(cs, {max_pos, d});
      Tensor qn = bf16(random_bf16(rng, size_t(d)), {d}),
             kn = bf16(random_bf16(rng, size_t(d)), {d});
      // Two copies of the same qkv and cache.
      Tensor qkv2 = alloc(DType::BF16, {a->tokens, (4 + 4) * d});
      be->copy(qkv2, a->qkv_t);
      const DType dt = a->cache.k.dtype;
      LayerKVCache cache2{alloc(dt, {a->num_blocks, 16, 2, d}),
                          alloc(dt, {a->num_blocks, 16, 2, d}), a->cache.k_scale, a->cache.v_scale};
      be->copy(cache2.k, a->cache.k);
      be->copy(cache2.v, a->cache.v);
      auto split = [&](Tensor t) {
        return std::array<Tensor, 3>{t.slice_last(0, 4 * d).unflatten_last(4),
                                     t.slice_last(4 * d, 6 * d).unflatten_last(2),
                                     t.slice_last(6 * d, 8 * d).unflatten_last(2)};
      };
      auto [q1, k1, v1] = split(a->qkv_t);
      auto [q2, k2, v2] = split(qkv2);
      if (with_norm) {
        be->rms_norm(q1, q1, qn, 1e-6f);
        be->rms_norm(k1, k1, kn, 1e-6f);
      }
      be->rope(q1, a->batch.positions, cos_sin);
      be->rope(k1, a->batch.positions, cos_sin);
      be->store_kv(k1, v1, a->cache, a->batch);
      be->qk_norm_rope_store_kv(q2, k2, v2, with_norm ? &qn : nullptr, with_norm ? &kn : nullptr,
                                1e-6f, a->batch.positions, cos_sin, cache2, a->batch);
      auto same = [&](const Tensor& x, const Tensor& y, const char* what) {
        std::vector<unsigned char> bx(x.nbytes()), by(y.nbytes());
        be->download(bx.data(), x);
        be->download(by.data(), y);
        ASSERT_EQ(bx.size(), by.size());
        for (size_t i = 0; i < bx.size(); ++i)
          ASSERT_EQ(bx[i], by[i]) << what << ": byte " << i << " differs";
      };
      same(a->qkv_t, qkv2, "qkv");
      same(a->cache.k, cache2.k, "k cache");
      same(a->cache.v, cache2.v, "v cache");
    }
  }
}

}  // namespace
}  // namespace nanovllm
