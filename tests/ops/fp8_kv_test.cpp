// The fp8 (E4M3) KV cache on the CPU backend: store_kv writes fp8(x / scale) exactly, and
// attention_prefill / attention_decode (AVX-512 and AVX2 paths, split partitions, large GQA
// groups) over fp8 blocks match the fp32 reference with K/V rounded to E4M3 the same way
// (ref::attention's Fp8KvScales). Decode stays independent of the batch under fp8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/attention_common.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "reference/ops_reference.h"
#include "runtime/fp8.h"
#include "runtime/forward_batch.h"

namespace nanovllm {
namespace {

using ref::Vec;

struct SeqSpec {
  int64_t seqlen_q;  // new tokens
  int64_t context;   // cached + new
};

Vec random_vec(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Sequences scattered over permuted blocks of an fp8 cache (garbage elsewhere), their raw f32 K/V
// stored through store_kv (every context token, cached prefix included), and the batch of the
// step that attends: each sequence's last seqlen_q tokens.
struct Fp8Case {
  int64_t hq, hkv, d, bs, num_blocks = 0;
  float k_scale, v_scale;
  int64_t window = 0;  // the cache's sliding window (0: none)
  std::vector<SeqSpec> seqs;
  std::vector<uint8_t> k_cache, v_cache;  // [num_blocks, bs, hkv, d] E4M3 codes
  std::vector<Vec> k, v;                  // per seq [context, hkv, d], raw f32
  std::vector<std::vector<int64_t>> slots;  // per seq, per context token
  Vec q;                                  // [T, hq, d]
  HostBatch host;
  ForwardBatch batch;

  Fp8Case(std::mt19937& rng, Backend& be, int64_t hq_, int64_t hkv_, int64_t d_, int64_t bs_,
          std::vector<SeqSpec> specs, bool prefill, float ks, float vs)
      : hq(hq_), hkv(hkv_), d(d_), bs(bs_), k_scale(ks), v_scale(vs), seqs(std::move(specs)) {
    int64_t max_blocks = 0, total_q = 0;
    for (const auto& s : seqs) {
      num_blocks += (s.context + bs - 1) / bs;
      max_blocks = std::max(max_blocks, (s.context + bs - 1) / bs);
      total_q += s.seqlen_q;
    }
    num_blocks += 3;
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const size_t elems = size_t(num_blocks * bs * hkv * d);
    std::uniform_int_distribution<int> byte(0, 255);
    k_cache.resize(elems);
    v_cache.resize(elems);
    for (size_t i = 0; i < elems; ++i) {  // garbage that is not NaN (mantissa 7 with exponent 15)
      k_cache[i] = uint8_t(byte(rng) & 0xFE);
      v_cache[i] = uint8_t(byte(rng) & 0xFE);
    }
    host.is_prefill = prefill;
    host.max_num_blocks = int(max_blocks + 1);
    host.cu_seqlens_q = {0};
    host.cu_seqlens_k = {0};
    HostBatch fill;  // stores every context token
    Vec fill_k, fill_v;
    size_t next_block = 0;
    for (const auto& s : seqs) {
      std::vector<int32_t> table(size_t(host.max_num_blocks), -1);
      for (int64_t b = 0; b < (s.context + bs - 1) / bs; ++b) table[size_t(b)] = perm[next_block++];
      host.block_tables.insert(host.block_tables.end(), table.begin(), table.end());
      Vec ks = random_vec(rng, size_t(s.context * hkv * d), -4.0f, 4.0f);
      Vec vs_ = random_vec(rng, size_t(s.context * hkv * d), -4.0f, 4.0f);
      ks[0] = 5000.0f;  // saturates at 448 * scale
      vs_[1] = -5000.0f;
      ks[2] = 1e-5f;    // zero in E4M3
      ks[3] = 0.004f;   // subnormal (times the scale below)
      for (size_t i = 5; i < ks.size(); i += 97) ks[i] *= 60.0f;  // E4M3's upper binades
      for (size_t i = 6; i < vs_.size(); i += 89) vs_[i] *= 60.0f;
      std::vector<int64_t> seq_slots;
      for (int64_t j = 0; j < s.context; ++j) {
        const int64_t slot = table[size_t(j / bs)] * bs + j % bs;
        seq_slots.push_back(slot);
        fill.slot_mapping.push_back(int32_t(slot));
        if (j >= s.context - s.seqlen_q) {
          host.slot_mapping.push_back(int32_t(slot));
          host.positions.push_back(int32_t(j));
        }
      }
      fill_k.insert(fill_k.end(), ks.begin(), ks.end());
      fill_v.insert(fill_v.end(), vs_.begin(), vs_.end());
      k.push_back(ks);
      v.push_back(vs_);
      slots.push_back(seq_slots);
      host.cu_seqlens_q.push_back(host.cu_seqlens_q.back() + int32_t(s.seqlen_q));
      host.cu_seqlens_k.push_back(host.cu_seqlens_k.back() + int32_t(s.context));
      host.context_lens.push_back(int32_t(s.context));
      host.max_seqlen_q = std::max<int>(host.max_seqlen_q, int(s.seqlen_q));
      host.max_seqlen_k = std::max<int>(host.max_seqlen_k, int(s.context));
    }
    host.input_ids.assign(size_t(total_q), 1);
    if (!prefill) host.cu_seqlens_q.clear();
    batch.host = &host;
    batch.is_prefill = prefill;
    batch.num_seqs = int(seqs.size());
    batch.num_tokens = int(total_q);
    q = random_vec(rng, size_t(total_q * hq * d), -3.0f, 3.0f);
    ForwardBatch fb;
    fb.host = &fill;
    fb.num_tokens = int(fill.slot_mapping.size());
    const int64_t n = int64_t(fill.slot_mapping.size());
    be.store_kv(Tensor::contiguous(fill_k.data(), DType::F32, {n, hkv, d}),
                Tensor::contiguous(fill_v.data(), DType::F32, {n, hkv, d}), cache(), fb);
  }

  int64_t tokens() const { return batch.num_tokens; }
  LayerKVCache cache() {
    return {Tensor::contiguous(k_cache.data(), DType::F8E4M3, {num_blocks, bs, hkv, d}),
            Tensor::contiguous(v_cache.data(), DType::F8E4M3, {num_blocks, bs, hkv, d}), k_scale,
            v_scale, window};
  }
  Tensor q_view() { return Tensor::contiguous(q.data(), DType::F32, {tokens(), hq, d}); }
  // An absolute tolerance for the outputs: f32 rounding of scores (up to |q| |k| d) and of the
  // weighted sum of values, relative to the largest value (about 240 here: the 60x entries).
  // bf16_prefill: the AVX-512 BF16 prefill kernel, whose P rounded to bf16 may move an output by
  // up to 2^-8 of the largest value (its q rounding is in the reference: round_q).
  float atol(bool bf16_prefill = false) const {
    float vmax = 0.0f;
    for (const Vec& vs : v)
      for (float x : vs) vmax = std::max(vmax, std::min(std::fabs(x), kFp8E4M3Max * v_scale));
    return 2e-5f + 2e-6f * vmax + (bf16_prefill ? 4.1e-3f * vmax : 0.0f);
  }
  Vec reference(float scale, bool round_q = false) const {
    const ref::Fp8KvScales fp8{k_scale, v_scale};
    Vec out;
    int64_t row = 0;
    for (size_t b = 0; b < seqs.size(); ++b) {
      Vec qb(q.begin() + row * hq * d, q.begin() + (row + seqs[b].seqlen_q) * hq * d);
      if (round_q) qb = ref::round_bf16(qb);
      row += seqs[b].seqlen_q;
      Vec o = ref::attention(qb, k[b], v[b], seqs[b].seqlen_q, seqs[b].context, hq, hkv, d, scale,
                             &fp8, window);
      out.insert(out.end(), o.begin(), o.end());
    }
    return out;
  }
};

// Magnitude-scaled: |got - want| <= atol + rtol * |want|.
void expect_close(const Vec& got, const Vec& want, float atol, float rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " off";
}

constexpr std::pair<float, float> kScales[] = {{1.0f, 1.0f}, {0.25f, 3.0f}};

// The kernels' vector conversions of all 256 codes equal runtime/fp8.h's (NaN stays NaN).
TEST(Fp8KvCache, RowConversionsAreExact) {
  std::vector<uint8_t> codes(256);
  std::iota(codes.begin(), codes.end(), 0);
  std::vector<float> f(256);
  std::vector<uint16_t> h(256 + 8);
  cpu::attention_detail::fp8_row_to_f32(f.data(), codes.data(), 256);
  cpu::attention_detail::fp8_row_to_bf16(h.data(), codes.data(), 256);
  cpu::attention_detail::fp8_row_to_bf16(h.data() + 256, codes.data() + 120, 8);  // the 8-wide tail
  for (int c = 0; c < 256; ++c) {
    const float want = fp8_e4m3_to_float(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f[size_t(c)]) && std::isnan(bf16_to_f32(h[size_t(c)]))) << c;
      continue;
    }
    EXPECT_EQ(f[size_t(c)], want) << "f32, code " << c;
    EXPECT_EQ(bf16_to_f32(h[size_t(c)]), want) << "bf16, code " << c;
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(h[size_t(256 + i)], h[size_t(120 + i)]) << i;
}

TEST(Fp8KvCache, StoreKvWritesRoundedCodes) {
  cpu::CpuBackend be(2);
  std::mt19937 rng(7);
  for (auto [ks, vs] : kScales) {
    Fp8Case c(rng, be, 4, 2, 64, 16, {{5, 9}, {1, 30}}, true, ks, vs);
    int64_t saturated = 0;
    for (size_t b = 0; b < c.seqs.size(); ++b)
      for (int64_t j = 0; j < c.seqs[b].context; ++j)
        for (int64_t e = 0; e < c.hkv * c.d; ++e) {
          const size_t at = size_t(c.slots[b][size_t(j)] * c.hkv * c.d + e);
          const float kx = c.k[b][size_t(j * c.hkv * c.d + e)];
          const float vx = c.v[b][size_t(j * c.hkv * c.d + e)];
          ASSERT_EQ(c.k_cache[at], float_to_fp8_e4m3(kx / ks)) << "k seq " << b << " token " << j;
          ASSERT_EQ(c.v_cache[at], float_to_fp8_e4m3(vx / vs)) << "v seq " << b << " token " << j;
          saturated += (c.k_cache[at] & 0x7F) == 0x7E;
        }
    EXPECT_GE(saturated, 2);  // the 5000s: 448 * scale
  }
}

// Prefill over fp8 blocks, cached prefixes included (context > seqlen_q), and decode, on the
// AVX-512 path (when the CPU has it) and forced onto AVX2, against the fp8-rounded reference.
TEST(Fp8KvCache, AttentionMatchesRoundedReferenceBothIsas) {
  std::mt19937 rng(11);
  // Auto (f32 prefill matmuls), Auto with the opt-in bf16 prefill kernel, and AVX2.
  const bool bf16 = cpu::bf16_prefill_available(cpu::cpu_isa_from_env());
  for (auto [isa, prefill_bf16] : {std::pair{cpu::CpuIsa::Auto, false}, std::pair{cpu::CpuIsa::Auto, bf16},
                                   std::pair{cpu::CpuIsa::AVX2, false}}) {
    cpu::CpuBackend be(2, isa, prefill_bf16);
    for (int64_t d : {64, 128})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{16, 8}, {32, 8}, {16, 2}, {6, 2},
                             {12, 1}})
        for (int64_t bs : {16, 256}) {
          const auto [ks, vs] = kScales[bs == 16 ? 1 : 0];  // scales 0.25 / 3 or 1 / 1
            SCOPED_TRACE(testing::Message() << "isa=" << cpu::cpu_isa_name(isa) << " d=" << d
                                            << " hq=" << hq << " hkv=" << hkv << " bs=" << bs
                                            << " k_scale=" << ks << " v_scale=" << vs);
            const float scale = 1.0f / std::sqrt(float(d));
            Fp8Case p(rng, be, hq, hkv, d, bs, {{7, 7}, {20, 75}, {1, 33}}, true, ks, vs);
            Vec out(size_t(p.tokens() * hq * d));
            be.attention_prefill(Tensor::contiguous(out.data(), DType::F32, {p.tokens(), hq, d}),
                                 p.q_view(), p.cache(), p.batch, scale);
            const bool bf16 = be.prefill_bf16();
            expect_close(out, p.reference(scale, bf16), p.atol(bf16), 2e-4f, "fp8 attention_prefill");
            Fp8Case c(rng, be, hq, hkv, d, bs, {{1, 1}, {1, 17}, {1, 300}, {1, 600}}, false, ks,
                      vs);
            Vec dout(size_t(c.tokens() * hq * d));
            be.attention_decode(Tensor::contiguous(dout.data(), DType::F32, {c.tokens(), hq, d}),
                                c.q_view(), c.cache(), c.batch, scale);
            expect_close(dout, c.reference(scale), c.atol(), 2e-4f, "fp8 attention_decode");
          }
  }
}

// Decode shapes off the usual ones, on both ISAs: head_dim 40 (a last 8 elements past the AVX2
// kernel's widest P.V step), GQA groups 5 and 7 and plain multi-head attention (group 1).
TEST(Fp8KvCache, DecodeOddShapesMatchRoundedReference) {
  std::mt19937 rng(13);
  for (cpu::CpuIsa isa : {cpu::CpuIsa::Auto, cpu::CpuIsa::AVX2}) {
    cpu::CpuBackend be(2, isa);
    for (int64_t d : {40, 128})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{10, 2}, {7, 1}, {4, 4}}) {
        SCOPED_TRACE(testing::Message() << "isa=" << cpu::cpu_isa_name(isa) << " d=" << d
                                        << " hq=" << hq << " hkv=" << hkv);
        const float scale = 1.0f / std::sqrt(float(d));
        Fp8Case c(rng, be, hq, hkv, d, 16, {{1, 1}, {1, 19}, {1, 600}}, false, 0.25f, 3.0f);
        Vec dout(size_t(c.tokens() * hq * d));
        be.attention_decode(Tensor::contiguous(dout.data(), DType::F32, {c.tokens(), hq, d}),
                            c.q_view(), c.cache(), c.batch, scale);
        expect_close(dout, c.reference(scale), c.atol(), 2e-4f, "fp8 attention_decode odd shapes");
      }
  }
}

// Mistral's sliding window over an fp8 cache: prefill and decode (a window inside the first
// partition and one past it) against the rounded reference, on every kernel.
TEST(Fp8KvCache, SlidingWindowMatchesRoundedReference) {
  std::mt19937 rng(12);
  const bool bf16 = cpu::bf16_prefill_available(cpu::cpu_isa_from_env());
  for (auto [isa, prefill_bf16] :
       {std::pair{cpu::CpuIsa::Auto, false}, std::pair{cpu::CpuIsa::Auto, bf16},
        std::pair{cpu::CpuIsa::AVX2, false}}) {
    cpu::CpuBackend be(2, isa, prefill_bf16);
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{16, 8}, {6, 2}})
      for (int64_t w : {20, 530}) {
        SCOPED_TRACE(testing::Message() << "isa=" << cpu::cpu_isa_name(isa) << " bf16 prefill="
                                        << be.prefill_bf16() << " hq=" << hq << " window=" << w);
        const float scale = 1.0f / std::sqrt(128.0f);
        Fp8Case p(rng, be, hq, hkv, 128, 16, {{20, 75}, {1, 33}, {70, 600}}, true, 0.25f, 3.0f);
        p.window = w;
        Vec out(size_t(p.tokens() * hq * 128));
        be.attention_prefill(Tensor::contiguous(out.data(), DType::F32, {p.tokens(), hq, 128}),
                             p.q_view(), p.cache(), p.batch, scale);
        expect_close(out, p.reference(scale, be.prefill_bf16()), p.atol(be.prefill_bf16()), 2e-4f,
                     "fp8 attention_prefill window");
        Fp8Case c(rng, be, hq, hkv, 128, 16, {{1, 17}, {1, 600}, {1, 1100}}, false, 0.25f, 3.0f);
        c.window = w;
        Vec dout(size_t(c.tokens() * hq * 128));
        be.attention_decode(Tensor::contiguous(dout.data(), DType::F32, {c.tokens(), hq, 128}),
                            c.q_view(), c.cache(), c.batch, scale);
        expect_close(dout, c.reference(scale), c.atol(), 2e-4f, "fp8 attention_decode window");
      }
  }
}

// A sequence's decode output is bitwise the same alone and in a batch, under fp8 too.
TEST(Fp8KvCache, DecodeDoesNotDependOnTheBatch) {
  std::mt19937 rng(5);
  // Auto (f32 prefill matmuls), Auto with the opt-in bf16 prefill kernel, and AVX2.
  const bool bf16 = cpu::bf16_prefill_available(cpu::cpu_isa_from_env());
  for (auto [isa, prefill_bf16] : {std::pair{cpu::CpuIsa::Auto, false}, std::pair{cpu::CpuIsa::Auto, bf16},
                                   std::pair{cpu::CpuIsa::AVX2, false}}) {
    cpu::CpuBackend be(2, isa, prefill_bf16);
    Fp8Case c(rng, be, 16, 8, 128, 16, {{1, 40}, {1, 700}, {1, 3}}, false, 0.5f, 2.0f);
    Vec all(size_t(c.tokens() * 16 * 128));
    be.attention_decode(Tensor::contiguous(all.data(), DType::F32, {c.tokens(), 16, 128}),
                        c.q_view(), c.cache(), c.batch, 0.088f);
    for (int b = 0; b < 3; ++b) {
      HostBatch one;
      one.max_num_blocks = c.host.max_num_blocks;
      one.context_lens = {c.host.context_lens[size_t(b)]};
      one.block_tables.assign(c.host.block_tables.begin() + b * one.max_num_blocks,
                              c.host.block_tables.begin() + (b + 1) * one.max_num_blocks);
      ForwardBatch fb;
      fb.host = &one;
      fb.num_seqs = 1;
      fb.num_tokens = 1;
      Vec alone(size_t(16 * 128));
      be.attention_decode(Tensor::contiguous(alone.data(), DType::F32, {1, 16, 128}),
                          Tensor::contiguous(c.q.data() + b * 16 * 128, DType::F32, {1, 16, 128}),
                          c.cache(), fb, 0.088f);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + b * 16 * 128))
          << "seq " << b << " isa " << cpu::cpu_isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace nanovllm
