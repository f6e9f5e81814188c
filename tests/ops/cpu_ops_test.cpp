// Every CpuBackend op against the scalar fp32 reference (tests/reference/ops_reference.h), on
// random non-zero inputs with odd sizes; tolerance |got - want| <= atol + rtol * |want|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_memory.h"
#include "runtime/forward_batch.h"
#include "reference/ops_reference.h"

namespace nanovllm {
namespace {

using ref::Vec;

// Backend buffers: 64-byte aligned at every size; from 2 MiB up on a 2 MiB boundary (where
// huge pages can back them) and zeroed, every byte writable, freed without a trace (ASan).
TEST(HostMemory, AlignedWritableAndFreed) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(4097), (size_t(2) << 20) - 1,
                       size_t(2) << 20, (size_t(6) << 20) + 12345}) {
    auto* p = static_cast<unsigned char*>(cpu::host_alloc(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    if (bytes >= (size_t(2) << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20), 0u) << bytes;
      EXPECT_EQ(p[0], 0) << bytes;
      EXPECT_EQ(p[bytes - 1], 0) << bytes;
    }
    if (bytes) {
      std::memset(p, 0xab, bytes);
      EXPECT_EQ(p[bytes - 1], 0xab);
    }
    cpu::host_free(p, bytes);
  }
  cpu::CpuBackend be(1);
  Buffer b = be.alloc(size_t(3) << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t(2) << 20), 0u);
  std::memset(b.data(), 1, b.bytes());
}

Vec random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) {
    do x = dist(rng);
    while (x == 0.0f);
  }
  return v;
}

// Random values that bf16 represents exactly.
Vec random_bf16(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  return ref::round_bf16(random_vec(rng, n, lo, hi));
}

std::vector<uint16_t> to_bf16(const Vec& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

Tensor t1(void* p, DType dt, int64_t a) { return Tensor::contiguous(p, dt, {a}); }
Tensor t2(void* p, DType dt, int64_t a, int64_t b) { return Tensor::contiguous(p, dt, {a, b}); }

void expect_close(const Vec& got, const Vec& want, float atol, float rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (tol "
                      << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

// Columns [c0, c0 + cols) of a [rows, width] row-major buffer, as a contiguous vector.
Vec columns(const Vec& buf, int64_t rows, int64_t width, int64_t c0, int64_t cols) {
  Vec out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), buf.begin() + r * width + c0, buf.begin() + r * width + c0 + cols);
  return out;
}

class CpuOps : public ::testing::Test {
 protected:
  cpu::CpuBackend be{2};
  std::mt19937 rng{1234};
  // The backends attention_prefill is tested on: the default (f32 matmuls) and, where the CPU
  // has AVX-512 BF16 and NANOVLLM_CPU_ISA allows it, the opt-in bf16 kernel.
  std::vector<std::unique_ptr<cpu::CpuBackend>> prefill_backends() const {
    std::vector<std::unique_ptr<cpu::CpuBackend>> out;
    out.push_back(std::make_unique<cpu::CpuBackend>(2, std::nullopt, false));
    if (cpu::bf16_prefill_available(cpu::cpu_isa_from_env()))
      out.push_back(std::make_unique<cpu::CpuBackend>(2, std::nullopt, true));
    return out;
  }
};

TEST_F(CpuOps, RegistryMakesCpuAndRejectsOthers) {
  BackendOptions opt;
  opt.num_threads = 1;
  auto b = make_backend(opt);
  EXPECT_EQ(b->device(), DeviceKind::CPU);
  EXPECT_EQ(b->activation_dtype(), DType::F32);
  EXPECT_NE(b->describe().find("1 thread"), std::string::npos) << b->describe();
  opt.device = "cuda";
#if !defined(NANOVLLM_WITH_CUDA)
  EXPECT_THROW(make_backend(opt), Error);
#endif
  opt.device = "tpu";
  try {
    make_backend(opt);
    ADD_FAILURE() << "no error for device 'tpu'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tpu"), std::string::npos) << e.what();
  }
}

TEST_F(CpuOps, MemoryOps) {
  Buffer buf = be.alloc(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  Tensor t = buf.as(DType::F32, {5, 5});
  Vec src = random_vec(rng, 25), back(25);
  be.upload(t, src.data());
  be.download(back.data(), t);
  EXPECT_EQ(src, back);
  Vec wide(5 * 8, 0.0f);  // copy into a strided view: columns [2, 7) of [5, 8]
  be.copy(t2(wide.data(), DType::F32, 5, 8).slice_last(2, 7), t);
  EXPECT_EQ(columns(wide, 5, 8, 2, 5), src);
  be.fill_zero(t);
  be.download(back.data(), t);
  EXPECT_EQ(back, Vec(25, 0.0f));
}

TEST_F(CpuOps, EmbeddingAndLinear) {
  const int64_t vocab = 37, hidden = 72;
  Vec table = random_bf16(rng, size_t(vocab * hidden));
  std::vector<uint16_t> table_bits = to_bf16(table);
  LinearWeight w = be.make_linear_weight(t2(table_bits.data(), DType::BF16, vocab, hidden));
  for (int64_t tokens : {1, 3, 17}) {
    std::vector<int32_t> ids(static_cast<size_t>(tokens));
    for (auto& id : ids) id = int32_t(rng() % vocab);
    Vec out(size_t(tokens * hidden));
    be.embedding(t2(out.data(), DType::F32, tokens, hidden), t1(ids.data(), DType::I32, tokens), w);
    EXPECT_EQ(out, ref::embedding(ids, table, hidden));

    // Tied LM head: logits = x @ table^T, x read from a strided view, out written strided.
    Vec x = random_bf16(rng, size_t(tokens * (hidden + 8)));
    Vec y(size_t(tokens * (vocab + 3)), 0.0f);
    Tensor xv = t2(x.data(), DType::F32, tokens, hidden + 8).slice_last(4, 4 + hidden);
    Tensor yv = t2(y.data(), DType::F32, tokens, vocab + 3).slice_last(0, vocab);
    Vec bias = random_bf16(rng, size_t(vocab));
    std::vector<uint16_t> bias_bits = to_bf16(bias);
    Tensor bias_t = t1(bias_bits.data(), DType::BF16, vocab);
    be.linear(yv, xv, w, &bias_t);
    Vec want =
        ref::linear(columns(x, tokens, hidden + 8, 4, hidden), table, bias, tokens, vocab, hidden);
    expect_close(columns(y, tokens, vocab + 3, 0, vocab), want, 1e-4f, 1e-4f, "linear+bias");
    be.linear(yv, xv, w, nullptr);
    want = ref::linear(columns(x, tokens, hidden + 8, 4, hidden), table, {}, tokens, vocab, hidden);
    expect_close(columns(y, tokens, vocab + 3, 0, vocab), want, 1e-4f, 1e-4f, "linear");
  }
}

TEST_F(CpuOps, RmsNorm) {
  const float eps = 1e-6f;
  for (int64_t tokens : {1, 3, 17}) {
    // 2-D, out of place.
    const int64_t d = 72;
    Vec x = random_vec(rng, size_t(tokens * d), -2.0f, 2.0f);
    Vec wt = random_bf16(rng, size_t(d));
    std::vector<uint16_t> wb = to_bf16(wt);
    Vec out(x.size());
    be.rms_norm(t2(out.data(), DType::F32, tokens, d), t2(x.data(), DType::F32, tokens, d),
                t1(wb.data(), DType::BF16, d), eps);
    expect_close(out, ref::rms_norm(x, wt, tokens, d, eps), 1e-5f, 1e-5f, "rms_norm 2-D");

    // 3-D per-head norm in place on a strided view (q of a fused qkv row: 3 heads of 32 of 160).
    const int64_t heads = 3, hd = 32, width = 160;
    Vec qkv = random_vec(rng, size_t(tokens * width));
    Vec hw = random_bf16(rng, size_t(hd));
    std::vector<uint16_t> hwb = to_bf16(hw);
    Tensor q =
        t2(qkv.data(), DType::F32, tokens, width).slice_last(0, heads * hd).unflatten_last(heads);
    Vec before = qkv;
    be.rms_norm(q, q, t1(hwb.data(), DType::BF16, hd), eps);
    Vec want =
        ref::rms_norm(columns(before, tokens, width, 0, heads * hd), hw, tokens * heads, hd, eps);
    expect_close(columns(qkv, tokens, width, 0, heads * hd), want, 1e-5f, 1e-5f, "rms_norm 3-D");
    EXPECT_EQ(columns(qkv, tokens, width, heads * hd, width - heads * hd),
              columns(before, tokens, width, heads * hd, width - heads * hd));

    // Fused residual add.
    Vec a = random_vec(rng, size_t(tokens * d)), res = random_vec(rng, size_t(tokens * d));
    Vec ra = a, rres = res;
    be.add_rms_norm(t2(a.data(), DType::F32, tokens, d), t2(res.data(), DType::F32, tokens, d),
                    t1(wb.data(), DType::BF16, d), eps);
    ref::add_rms_norm(ra, rres, wt, tokens, d, eps);
    expect_close(res, rres, 1e-6f, 1e-6f, "add_rms_norm residual");
    expect_close(a, ra, 1e-5f, 1e-5f, "add_rms_norm x");
  }
}

TEST_F(CpuOps, Rope) {
  const int64_t max_pos = 300;
  for (int64_t d : {32, 64, 128}) {
    const Vec cs = ref::rope_cos_sin(max_pos, d, 1e6);
    for (int64_t tokens : {1, 3, 17}) {
      const int64_t heads = 3, width = heads * d + 24;  // q of a wider fused row
      Vec buf = random_vec(rng, size_t(tokens * width));
      std::vector<int32_t> pos(static_cast<size_t>(tokens));
      for (auto& p : pos) p = int32_t(rng() % max_pos);
      Vec want = columns(buf, tokens, width, 0, heads * d);
      ref::rope(want, pos, cs, heads, d);
      Tensor x =
          t2(buf.data(), DType::F32, tokens, width).slice_last(0, heads * d).unflatten_last(heads);
      be.rope(x, t1(pos.data(), DType::I32, tokens),
              t2(const_cast<float*>(cs.data()), DType::F32, max_pos, d));
      expect_close(columns(buf, tokens, width, 0, heads * d), want, 1e-5f, 1e-5f, "rope");
    }
  }
}

TEST_F(CpuOps, SiluAndMulAndGather) {
  for (int64_t tokens : {1, 3, 17}) {
    const int64_t n = 77;
    Vec x = random_vec(rng, size_t(tokens * 2 * n), -8.0f, 8.0f);
    Vec out(size_t(tokens * n));
    be.silu_and_mul(t2(out.data(), DType::F32, tokens, n), t2(x.data(), DType::F32, tokens, 2 * n));
    expect_close(out, ref::silu_and_mul(x, tokens, n), 1e-6f, 1e-5f, "silu_and_mul");

    std::vector<int32_t> idx = {int32_t(tokens - 1), 0, int32_t(tokens / 2)};
    Vec g(idx.size() * size_t(n));
    be.gather_rows(t2(g.data(), DType::F32, int64_t(idx.size()), n),
                   t2(out.data(), DType::F32, tokens, n),
                   t1(idx.data(), DType::I32, int64_t(idx.size())));
    EXPECT_EQ(g, ref::gather_rows(out, idx, n));
  }
}

// ---- paged attention ----

struct SeqSpec {
  int64_t seqlen_q;  // new tokens
  int64_t context;   // cached + new
};

// A paged KV cache with sequences scattered over randomly permuted blocks, the step's batch
// metadata, and each sequence's contiguous bf16-valued K/V for the reference.
struct PagedCase {
  int64_t hq, hkv, d, block_size, num_blocks = 0;
  int64_t window = 0;  // the cache's sliding window (0: none)
  std::vector<SeqSpec> seqs;
  std::vector<uint16_t> k_cache, v_cache;  // [num_blocks, block_size, hkv, d]
  std::vector<Vec> k, v;                   // per seq [context, hkv, d]
  Vec q;                                   // [T, hq + 2 hkv, d] (q, then room for k, v: strided q)
  HostBatch host;
  ForwardBatch batch;

  PagedCase(std::mt19937& rng, int64_t hq_, int64_t hkv_, int64_t d_, int64_t bs,
            std::vector<SeqSpec> specs, bool prefill)
      : hq(hq_), hkv(hkv_), d(d_), block_size(bs), seqs(std::move(specs)) {
    int64_t max_blocks = 0, total_q = 0;
    for (const auto& s : seqs) {
      num_blocks += (s.context + bs - 1) / bs;
      max_blocks = std::max(max_blocks, (s.context + bs - 1) / bs);
      total_q += s.seqlen_q;
    }
    num_blocks += 3;  // unused blocks, full of garbage
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const size_t cache_elems = size_t(num_blocks * bs * hkv * d);
    k_cache = to_bf16(random_vec(rng, cache_elems, -50.0f, 50.0f));
    v_cache = to_bf16(random_vec(rng, cache_elems, -50.0f, 50.0f));
    host.is_prefill = prefill;
    host.max_num_blocks = int(max_blocks + 1);  // one column of -1 padding
    host.cu_seqlens_q = {0};
    host.cu_seqlens_k = {0};
    size_t next_block = 0;
    for (const auto& s : seqs) {
      std::vector<int32_t> table(size_t(host.max_num_blocks), -1);
      for (int64_t b = 0; b < (s.context + bs - 1) / bs; ++b) table[size_t(b)] = perm[next_block++];
      host.block_tables.insert(host.block_tables.end(), table.begin(), table.end());
      Vec ks = random_bf16(rng, size_t(s.context * hkv * d)),
          vs = random_bf16(rng, size_t(s.context * hkv * d));
      for (int64_t j = 0; j < s.context; ++j) {
        const int64_t slot = table[size_t(j / bs)] * bs + j % bs;
        for (int64_t e = 0; e < hkv * d; ++e) {
          k_cache[size_t(slot * hkv * d + e)] = f32_to_bf16(ks[size_t(j * hkv * d + e)]);
          v_cache[size_t(slot * hkv * d + e)] = f32_to_bf16(vs[size_t(j * hkv * d + e)]);
        }
        if (j >= s.context - s.seqlen_q) {
          host.slot_mapping.push_back(int32_t(slot));
          host.positions.push_back(int32_t(j));
        }
      }
      k.push_back(ks);
      v.push_back(vs);
      host.cu_seqlens_q.push_back(host.cu_seqlens_q.back() + int32_t(s.seqlen_q));
      host.cu_seqlens_k.push_back(host.cu_seqlens_k.back() + int32_t(s.context));
      host.context_lens.push_back(int32_t(s.context));
      host.max_seqlen_q = std::max<int>(host.max_seqlen_q, int(s.seqlen_q));
      host.max_seqlen_k = std::max<int>(host.max_seqlen_k, int(s.context));
    }
    host.input_ids.assign(size_t(total_q), 1);
    if (!prefill) host.cu_seqlens_q.clear();  // decode does not need them
    batch.host = &host;
    batch.is_prefill = prefill;
    batch.num_seqs = int(seqs.size());
    batch.num_tokens = int(total_q);
    q = random_vec(rng, size_t(total_q * (hq + 2 * hkv) * d), -3.0f, 3.0f);
  }

  int64_t tokens() const { return batch.num_tokens; }
  LayerKVCache cache() {
    LayerKVCache c{
        Tensor::contiguous(k_cache.data(), DType::BF16, {num_blocks, block_size, hkv, d}),
        Tensor::contiguous(v_cache.data(), DType::BF16, {num_blocks, block_size, hkv, d})};
    c.sliding_window = window;
    return c;
  }
  Tensor q_view() {
    return t2(q.data(), DType::F32, tokens(), (hq + 2 * hkv) * d)
        .slice_last(0, hq * d)
        .unflatten_last(hq);
  }
  // round_q: q rounded to bf16 first, as the AVX-512 BF16 prefill kernel does.
  Vec reference(float scale, bool round_q = false) const {
    Vec out;
    int64_t row = 0;
    const int64_t width = (hq + 2 * hkv) * d;
    for (size_t b = 0; b < seqs.size(); ++b) {
      Vec qb;
      for (int64_t i = 0; i < seqs[b].seqlen_q; ++i, ++row)
        qb.insert(qb.end(), q.begin() + row * width, q.begin() + row * width + hq * d);
      if (round_q) qb = ref::round_bf16(qb);
      Vec o = ref::attention(qb, k[b], v[b], seqs[b].seqlen_q, seqs[b].context, hq, hkv, d, scale,
                             nullptr, window);
      out.insert(out.end(), o.begin(), o.end());
    }
    return out;
  }
};

// attention_prefill against the fp32 reference. On the opt-in AVX-512 BF16 kernel (prefill_bf16()) the
// reference takes q rounded to bf16, and P's rounding to bf16 may move an output by up to
// 2^-8 of the largest |v| (the kernel's sum l is of the unrounded P); elsewhere f32 rounding only.
void expect_prefill_close(const cpu::CpuBackend& be, const Vec& out, const PagedCase& c, float scale,
                          const char* what) {
  const bool bf16 = be.prefill_bf16() && c.d % 16 == 0;
  float vmax = 0.0f;
  for (const Vec& vs : c.v)
    for (float x : vs) vmax = std::max(vmax, std::fabs(x));
  expect_close(out, c.reference(scale, bf16), 2e-5f + (bf16 ? 4.1e-3f * vmax : 0.0f), 1e-4f, what);
}

TEST_F(CpuOps, AttentionPrefill) {
  const std::vector<SeqSpec> specs = {{17, 17}, {3, 40}, {1, 1}, {20, 53}, {5, 16}};
  for (const auto& pb : prefill_backends())
    for (int64_t d : {32, 64, 128})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {8, 2}})
        for (int64_t bs : {16, 256}) {
          PagedCase c(rng, hq, hkv, d, bs, specs, true);
          const float scale = 1.0f / std::sqrt(float(d));
          Vec out(size_t(c.tokens() * hq * d));
          pb->attention_prefill(Tensor::contiguous(out.data(), DType::F32, {c.tokens(), hq, d}),
                                c.q_view(), c.cache(), c.batch, scale);
          SCOPED_TRACE(testing::Message() << pb->describe() << " d=" << d << " hq=" << hq
                                          << " hkv=" << hkv << " bs=" << bs);
          expect_prefill_close(*pb, out, c, scale, "attention_prefill");
        }
}

TEST_F(CpuOps, AttentionPrefillLongPrompt) {  // many query blocks and key chunks in one sequence
  for (const auto& pb : prefill_backends()) {
    PagedCase c(rng, 4, 2, 64, 16, {{150, 170}}, true);
    const float scale = 0.125f;
    Vec out(size_t(c.tokens() * 4 * 64));
    pb->attention_prefill(Tensor::contiguous(out.data(), DType::F32, {c.tokens(), 4, 64}),
                          c.q_view(), c.cache(), c.batch, scale);
    SCOPED_TRACE(pb->describe());
    expect_prefill_close(*pb, out, c, scale, "attention_prefill long");
  }
}

// head_dim 40 (past the AVX2 kernel's widest P.V step, a last 8 elements) and GQA groups 1, 2,
// 4, 5 and 7 (the last two: shapes the AVX-512 path never takes).
TEST_F(CpuOps, AttentionDecode) {
  const std::vector<SeqSpec> specs = {{1, 1}, {1, 15}, {1, 16}, {1, 17}, {1, 300}};
  for (int64_t d : {32, 40, 64, 128})
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {8, 2}, {10, 2}, {7, 1}})
      for (int64_t bs : {16, 256}) {
        PagedCase c(rng, hq, hkv, d, bs, specs, false);
        const float scale = 1.0f / std::sqrt(float(d));
        Vec out(size_t(c.tokens() * hq * d));
        be.attention_decode(Tensor::contiguous(out.data(), DType::F32, {c.tokens(), hq, d}),
                            c.q_view(), c.cache(), c.batch, scale);
        SCOPED_TRACE(testing::Message()
                     << "d=" << d << " hq=" << hq << " hkv=" << hkv << " bs=" << bs);
        expect_close(out, c.reference(scale), 2e-5f, 1e-4f, "attention_decode");
      }
}

// Shapes that take the other paths of the tiled prefill kernel: GQA groups whose query blocks
// need padding rows (3, 5), the Qwen3 shape (16 q heads over 8 kv heads, head_dim 128), prompts
// spanning several key tiles and cache blocks, and chunked prefill (new tokens after a cached
// prefix: no tile is entirely unmasked for the first rows).
TEST_F(CpuOps, AttentionPrefillTiles) {
  struct Case {
    int64_t hq, hkv, d, bs;
    std::vector<SeqSpec> specs;
  };
  const std::vector<Case> cases = {
      {6, 2, 64, 16, {{37, 37}, {50, 130}, {1, 49}}},
      {5, 1, 32, 256, {{23, 23}, {9, 300}}},
      {16, 8, 128, 256, {{130, 130}, {70, 200}}},
      {16, 8, 128, 16, {{97, 161}}},
      {32, 2, 64, 16, {{11, 60}, {2, 2}}},  // group 16: one token per query block
  };
  for (const auto& pb : prefill_backends())
    for (const Case& cs : cases) {
      PagedCase c(rng, cs.hq, cs.hkv, cs.d, cs.bs, cs.specs, true);
      const float scale = 1.0f / std::sqrt(float(cs.d));
      Vec out(size_t(c.tokens() * cs.hq * cs.d));
      pb->attention_prefill(Tensor::contiguous(out.data(), DType::F32, {c.tokens(), cs.hq, cs.d}),
                            c.q_view(), c.cache(), c.batch, scale);
      SCOPED_TRACE(testing::Message() << pb->describe() << " d=" << cs.d << " hq=" << cs.hq
                                      << " hkv=" << cs.hkv << " bs=" << cs.bs);
      expect_prefill_close(*pb, out, c, scale, "attention_prefill tiles");
    }
}

// Decode of few sequences with long contexts: each is split into partitions whose softmax
// states are merged; also GQA groups of 3 and 16 (the latter through the prefill kernel).
TEST_F(CpuOps, AttentionDecodeSplitAndGroups) {
  struct Case {
    int64_t hq, hkv, d, bs;
    std::vector<SeqSpec> specs;
  };
  const std::vector<Case> cases = {
      {16, 8, 128, 256, {{1, 1500}}},
      {16, 8, 128, 16, {{1, 1024}, {1, 3}, {1, 700}}},
      {6, 2, 64, 16, {{1, 777}, {1, 40}}},
      {16, 1, 64, 16, {{1, 530}, {1, 17}}},
  };
  for (const Case& cs : cases) {
    PagedCase c(rng, cs.hq, cs.hkv, cs.d, cs.bs, cs.specs, false);
    const float scale = 1.0f / std::sqrt(float(cs.d));
    Vec out(size_t(c.tokens() * cs.hq * cs.d));
    be.attention_decode(Tensor::contiguous(out.data(), DType::F32, {c.tokens(), cs.hq, cs.d}),
                        c.q_view(), c.cache(), c.batch, scale);
    SCOPED_TRACE(testing::Message() << "d=" << cs.d << " hq=" << cs.hq << " hkv=" << cs.hkv
                                    << " bs=" << cs.bs);
    expect_close(out, c.reference(scale), 2e-5f, 1e-4f, "attention_decode split");
  }
}

// Shapes of the AVX-512 decode path (a multiple of 16 query heads, GQA group 1/2/4/8, head_dim
// 64 or 128; taken when the CPU has AVX-512), and the same shapes forced onto the AVX2 path
// (CpuIsa::AVX2, as NANOVLLM_CPU_ISA=avx2 does): both against the reference, including split
// sequences and chunk tails.
TEST_F(CpuOps, AttentionDecodeWideShapesBothIsas) {
  const std::vector<SeqSpec> specs = {{1, 1}, {1, 15}, {1, 17}, {1, 300}, {1, 1100}};
  for (cpu::CpuIsa isa : {cpu::CpuIsa::Auto, cpu::CpuIsa::AVX2}) {
    cpu::CpuBackend ibe(2, isa);
    EXPECT_EQ(ibe.decode_avx512(), isa == cpu::CpuIsa::Auto && cpu::cpu_has_avx512());
    for (int64_t d : {64, 128})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{16, 16}, {16, 8}, {32, 8}, {16, 2}})
        for (int64_t bs : {16, 256}) {
          PagedCase c(rng, hq, hkv, d, bs, specs, false);
          const float scale = 1.0f / std::sqrt(float(d));
          Vec out(size_t(c.tokens() * hq * d));
          ibe.attention_decode(Tensor::contiguous(out.data(), DType::F32, {c.tokens(), hq, d}),
                               c.q_view(), c.cache(), c.batch, scale);
          SCOPED_TRACE(testing::Message() << "isa=" << cpu::cpu_isa_name(isa) << " d=" << d << " hq=" << hq
                                          << " hkv=" << hkv << " bs=" << bs);
          expect_close(out, c.reference(scale), 2e-5f, 1e-4f, "attention_decode wide");
        }
  }
}

// Mistral's sliding window W (query at p sees keys (p - W, p]) against the reference: prefill
// (whole prompts and chunks after a cached prefix, windows of one key, inside one tile, across
// tiles and cache blocks, wider than the context) on every prefill kernel, and decode on both
// ISAs (windows that start mid-partition, partitions skipped whole, the GQA-16 path through the
// prefill kernel). A window at least as long as every context changes no bit.
TEST_F(CpuOps, AttentionSlidingWindow) {
  struct Shape {
    int64_t hq, hkv, d;
  };
  const std::vector<Shape> shapes = {{4, 2, 64}, {6, 2, 32}, {16, 8, 128}, {32, 2, 64}};
  const std::vector<SeqSpec> prefill = {{100, 100}, {30, 130}, {1, 77}, {64, 64}, {5, 6}};
  const std::vector<SeqSpec> decode = {{1, 1}, {1, 24}, {1, 25}, {1, 600}, {1, 1100}, {1, 1536}};
  auto run = [&](cpu::CpuBackend& b, PagedCase& c, float scale) {
    Vec out(size_t(c.tokens() * c.hq * c.d));
    const Tensor o = Tensor::contiguous(out.data(), DType::F32, {c.tokens(), c.hq, c.d});
    if (c.batch.is_prefill)
      b.attention_prefill(o, c.q_view(), c.cache(), c.batch, scale);
    else
      b.attention_decode(o, c.q_view(), c.cache(), c.batch, scale);
    return out;
  };
  for (const Shape& sh : shapes) {
    const float scale = 1.0f / std::sqrt(float(sh.d));
    for (const auto& pb : prefill_backends()) {
      PagedCase c(rng, sh.hq, sh.hkv, sh.d, 16, prefill, true);
      const Vec full = run(*pb, c, scale);
      for (int64_t w : {1, 7, 24, 48, 64, 65, 130}) {
        c.window = w;
        SCOPED_TRACE(testing::Message() << pb->describe() << " hq=" << sh.hq << " hkv=" << sh.hkv
                                        << " d=" << sh.d << " window=" << w);
        const Vec out = run(*pb, c, scale);
        if (w >= 130)
          EXPECT_EQ(out, full);
        else
          expect_prefill_close(*pb, out, c, scale, "attention_prefill window");
      }
    }
    for (cpu::CpuIsa isa : {cpu::CpuIsa::Auto, cpu::CpuIsa::AVX2}) {
      cpu::CpuBackend ibe(2, isa);
      PagedCase c(rng, sh.hq, sh.hkv, sh.d, 16, decode, false);
      const Vec full = run(ibe, c, scale);
      const std::vector<int32_t> tables = c.host.block_tables;
      for (int64_t w : {1, 24, 100, 512, 513, 1000, 1536}) {
        c.window = w;
        // The blocks wholly below each window are freed in the engine (-1): never read.
        c.host.block_tables = tables;
        for (size_t b = 0; b < decode.size(); ++b)
          for (int64_t blk = 0; (blk + 1) * 16 <= decode[b].context - w; ++blk)
            c.host.block_tables[b * size_t(c.host.max_num_blocks) + size_t(blk)] = -1;
        SCOPED_TRACE(testing::Message() << "isa=" << cpu::cpu_isa_name(isa) << " hq=" << sh.hq
                                        << " hkv=" << sh.hkv << " d=" << sh.d << " window=" << w);
        const Vec out = run(ibe, c, scale);
        if (w >= 1536)
          EXPECT_EQ(out, full);
        else
          expect_close(out, c.reference(scale), 2e-5f, 1e-4f, "attention_decode window");
      }
    }
  }
}

// NANOVLLM_PREFILL_ATTENTION: unset or f32 keeps the f32 prefill matmuls; bf16 opts into the AVX-512
// BF16 kernel (describe() says so; an Error where the GEMMs are not AVX-512 BF16); any other
// value is an Error naming the accepted ones.
TEST(CpuIsa, PrefillAttentionEnvironmentVariable) {
  const char* saved_isa = std::getenv("NANOVLLM_CPU_ISA");
  const char* saved = std::getenv("NANOVLLM_PREFILL_ATTENTION");
  const std::string keep_isa = saved_isa ? saved_isa : "", keep = saved ? saved : "";
  unsetenv("NANOVLLM_CPU_ISA");
  unsetenv("NANOVLLM_PREFILL_ATTENTION");
  EXPECT_FALSE(cpu::CpuBackend(1).prefill_bf16());
  setenv("NANOVLLM_PREFILL_ATTENTION", "f32", 1);
  EXPECT_FALSE(cpu::CpuBackend(1).prefill_bf16());
  setenv("NANOVLLM_PREFILL_ATTENTION", "bf16", 1);
  if (cpu::cpu_has_avx512_bf16()) {
    cpu::CpuBackend b(1);
    EXPECT_TRUE(b.prefill_bf16());
    EXPECT_NE(b.describe().find("prefill attention bf16"), std::string::npos) << b.describe();
  } else {
    EXPECT_THROW(cpu::CpuBackend(1), Error);
  }
  setenv("NANOVLLM_CPU_ISA", "avx2", 1);
  try {
    cpu::CpuBackend b(1);
    ADD_FAILURE() << "bf16 prefill attention accepted with NANOVLLM_CPU_ISA=avx2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs AVX-512 BF16"), std::string::npos) << e.what();
  }
  unsetenv("NANOVLLM_CPU_ISA");
  setenv("NANOVLLM_PREFILL_ATTENTION", "fp16", 1);
  try {
    cpu::CpuBackend b(1);
    ADD_FAILURE() << "NANOVLLM_PREFILL_ATTENTION=fp16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be f32 or bf16, got 'fp16'"), std::string::npos) << e.what();
  }
  if (saved_isa) setenv("NANOVLLM_CPU_ISA", keep_isa.c_str(), 1);
  else unsetenv("NANOVLLM_CPU_ISA");
  if (saved) setenv("NANOVLLM_PREFILL_ATTENTION", keep.c_str(), 1);
  else unsetenv("NANOVLLM_PREFILL_ATTENTION");
}

// NANOVLLM_CPU_ISA: avx2 forces the AVX2 GEMM and decode attention and describe() says so;
// avxvnni the same with the AVX-VNNI quantized tiles (an Error on a CPU without AVX-VNNI);
// avx512 demands AVX-512 (an Error on a CPU without it); any other value is an Error naming it.
TEST(CpuIsa, EnvironmentVariableSelectsKernels) {
  const char* saved = std::getenv("NANOVLLM_CPU_ISA");
  const std::string keep = saved ? saved : "";
  setenv("NANOVLLM_CPU_ISA", "avx2", 1);
  {
    cpu::CpuBackend b(1);
    EXPECT_EQ(b.gemm_isa(), cpu::GemmIsa::AVX2);
    EXPECT_FALSE(b.decode_avx512());
    EXPECT_NE(b.describe().find("gemm avx2_fma, decode attention avx2"), std::string::npos) << b.describe();
    EXPECT_EQ(cpu::detect_gemm_isa(), cpu::GemmIsa::AVX2);
  }
  setenv("NANOVLLM_CPU_ISA", "avxvnni", 1);
  if (__builtin_cpu_supports("avxvnni")) {
    cpu::CpuBackend b(1);
    EXPECT_EQ(b.gemm_isa(), cpu::GemmIsa::AVX2);
    EXPECT_FALSE(b.decode_avx512());
    EXPECT_EQ(b.qgemm_isa(), cpu::QGemmIsa::AVX_VNNI);
    EXPECT_NE(b.describe().find("gemm avx2_fma, decode attention avx2"), std::string::npos)
        << b.describe();
    EXPECT_NE(b.describe().find("quantized gemm avx_vnni"), std::string::npos) << b.describe();
  } else {
    EXPECT_THROW(cpu::CpuBackend(1), Error);
  }
  setenv("NANOVLLM_CPU_ISA", "avx512", 1);
  if (cpu::cpu_has_avx512()) {  // the faster AVX-512 GEMM of this core (vdpbf16ps or FMA)
    cpu::CpuBackend b(1);
    EXPECT_EQ(b.gemm_isa(), cpu::select_gemm_isa(cpu::CpuIsa::AVX512));
    EXPECT_NE(b.gemm_isa(), cpu::GemmIsa::AVX2);
    EXPECT_NE(b.gemm_isa(), cpu::GemmIsa::AMX_BF16);
    if (!cpu::cpu_has_avx512_bf16()) {
      EXPECT_EQ(b.gemm_isa(), cpu::GemmIsa::AVX512_FMA);
    }
    EXPECT_TRUE(b.decode_avx512());
    EXPECT_NE(b.describe().find(std::string("gemm ") + cpu::gemm_isa_name(b.gemm_isa()) +
                                ", decode attention avx512"),
              std::string::npos)
        << b.describe();
  } else {
    EXPECT_THROW(cpu::CpuBackend(1), Error);
  }
  setenv("NANOVLLM_CPU_ISA", "amx", 1);
  if (cpu::cpu_has_amx_bf16()) {
    cpu::CpuBackend b(1);
    EXPECT_EQ(b.gemm_isa(), cpu::GemmIsa::AMX_BF16);
    EXPECT_TRUE(b.decode_avx512());
    EXPECT_NE(b.describe().find("gemm amx_bf16, decode attention avx512"), std::string::npos)
        << b.describe();
  } else {
    EXPECT_THROW(cpu::CpuBackend(1), Error);
  }
  setenv("NANOVLLM_CPU_ISA", "sse9", 1);
  try {
    cpu::CpuBackend b(1);
    ADD_FAILURE() << "NANOVLLM_CPU_ISA=sse9 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sse9': expected auto, avx2, avxvnni, avx512 or amx"),
              std::string::npos)
        << e.what();
  }
  if (saved) setenv("NANOVLLM_CPU_ISA", keep.c_str(), 1);
  else unsetenv("NANOVLLM_CPU_ISA");
  EXPECT_EQ(cpu::parse_cpu_isa("auto"), cpu::CpuIsa::Auto);
  EXPECT_EQ(cpu::parse_cpu_isa(""), cpu::CpuIsa::Auto);
  EXPECT_EQ(cpu::parse_cpu_isa("avxvnni"), cpu::CpuIsa::AVXVNNI);
  EXPECT_EQ(cpu::parse_cpu_isa("amx"), cpu::CpuIsa::AMX);
  EXPECT_THROW(cpu::parse_cpu_isa("AVX2"), Error);
}

TEST_F(CpuOps, StoreKv) {
  for (int64_t bs : {16, 256}) {
    PagedCase c(rng, 4, 2, 64, bs, {{5, 9}, {17, 17}, {1, 30}}, true);
    const int64_t hkv = 2, d = 64, tokens = c.tokens();
    c.host.slot_mapping[1] = -1;  // padding: writes nothing
    Vec kv = random_vec(rng, size_t(tokens * 2 * hkv * d) + 8);
    const std::vector<uint16_t> k0 = c.k_cache, v0 = c.v_cache;
    Tensor rows = t2(kv.data(), DType::F32, tokens, 2 * hkv * d);  // [k | v] per token: strided
    be.store_kv(rows.slice_last(0, hkv * d).unflatten_last(hkv),
                rows.slice_last(hkv * d, 2 * hkv * d).unflatten_last(hkv), c.cache(), c.batch);
    std::vector<uint16_t> want_k = k0, want_v = v0;
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t slot = c.host.slot_mapping[size_t(t)];
      if (slot < 0) continue;
      for (int64_t e = 0; e < hkv * d; ++e) {
        want_k[size_t(slot * hkv * d + e)] = f32_to_bf16(kv[size_t(t * 2 * hkv * d + e)]);
        want_v[size_t(slot * hkv * d + e)] = f32_to_bf16(kv[size_t(t * 2 * hkv * d + hkv * d + e)]);
      }
    }
    EXPECT_TRUE(c.k_cache == want_k) << "k cache differs, block_size " << bs;
    EXPECT_TRUE(c.v_cache == want_v) << "v cache differs, block_size " << bs;
  }
}

// ---- sampler ----

struct SampleCase {
  HostBatch host;
  ForwardBatch batch;
  explicit SampleCase(int64_t n) {
    host.temperatures.assign(size_t(n), 0.0f);
    host.top_k.assign(size_t(n), 0);
    host.top_p.assign(size_t(n), 1.0f);
    host.seeds.assign(size_t(n), 0);
    host.sample_offsets.assign(size_t(n), 0);
    batch.host = &host;
    batch.num_seqs = int(n);
  }
};

std::vector<int32_t> run_sample(Backend& be, Vec& logits, int64_t vocab, SampleCase& sc) {
  const int64_t n = int64_t(logits.size()) / vocab;
  std::vector<int32_t> out(size_t(n), -7);
  be.sample(t1(out.data(), DType::I32, n), t2(logits.data(), DType::F32, n, vocab), sc.batch);
  return out;
}

TEST_F(CpuOps, SampleGreedyTiesPickLowestIndex) {
  const int64_t vocab = 50;
  Vec logits = random_vec(rng, size_t(3 * vocab), -2.0f, 2.0f);
  logits[9] = logits[5] = 7.0f;                   // row 0: tie at 5 and 9
  logits[vocab + 0] = logits[vocab + 49] = 9.0f;  // row 1: tie at 0 and 49
  logits[2 * vocab + 33] = 3.0f;                  // row 2: single max
  SampleCase sc(3);
  EXPECT_EQ(run_sample(be, logits, vocab, sc), (std::vector<int32_t>{5, 0, 33}));
}

TEST_F(CpuOps, SampleMatchesReferenceExactly) {
  struct Params {
    float temperature;
    int32_t top_k;
    float top_p;
  };
  const std::vector<Params> params = {{0.7f, 0, 1.0f},   {1.0f, 20, 1.0f},   {0.6f, 20, 0.95f},
                                      {1.3f, 0, 0.9f},   {0.8f, 0, 0.5f},    {2.0f, 5, 0.3f},
                                      {1.0f, 999, 1.0f}, {0.9f, 1000, 0.99f}};
  for (int64_t vocab : {1000, 151936}) {
    const int64_t n = vocab == 1000 ? 160 : 8;
    Vec logits = random_vec(rng, size_t(n * vocab), -6.0f, 6.0f);
    SampleCase sc(n);
    for (int64_t b = 0; b < n; ++b) {
      const Params& p = params[size_t(b) % params.size()];
      sc.host.temperatures[size_t(b)] = p.temperature;
      sc.host.top_k[size_t(b)] = p.top_k;
      sc.host.top_p[size_t(b)] = p.top_p;
      sc.host.seeds[size_t(b)] = 0x9e3779b9ull * uint64_t(b + 1);
      sc.host.sample_offsets[size_t(b)] = b * 7;
    }
    const std::vector<int32_t> got = run_sample(be, logits, vocab, sc);
    for (int64_t b = 0; b < n; ++b) {
      Vec row(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
      EXPECT_EQ(got[size_t(b)],
                ref::sample(row, sc.host.temperatures[size_t(b)], sc.host.top_k[size_t(b)],
                            sc.host.top_p[size_t(b)], sc.host.seeds[size_t(b)],
                            sc.host.sample_offsets[size_t(b)]))
          << "vocab " << vocab << " seq " << b;
    }
  }
}

TEST_F(CpuOps, SampleTopKOneAndTinyTopPAreGreedy) {
  const int64_t vocab = 300, n = 40;
  Vec logits = random_vec(rng, size_t(n * vocab), -5.0f, 5.0f);
  SampleCase greedy(n), sc(n);
  for (int64_t b = 0; b < n; ++b) {
    sc.host.temperatures[size_t(b)] = 1.0f + 0.1f * float(b % 5);
    sc.host.seeds[size_t(b)] = uint64_t(b);
    sc.host.sample_offsets[size_t(b)] = b;
    if (b % 2)
      sc.host.top_k[size_t(b)] = 1;
    else
      sc.host.top_p[size_t(b)] = 1e-6f;
  }
  EXPECT_EQ(run_sample(be, logits, vocab, sc), run_sample(be, logits, vocab, greedy));
}

TEST_F(CpuOps, SampleEmpiricalDistribution) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const int64_t vocab = 4, n = 20000;
  Vec logits;
  for (int64_t b = 0; b < n; ++b)
    for (double p : probs) logits.push_back(float(std::log(p)));
  SampleCase sc(n);
  for (int64_t b = 0; b < n; ++b) {
    sc.host.temperatures[size_t(b)] = 1.0f;
    sc.host.seeds[size_t(b)] = 42;
    sc.host.sample_offsets[size_t(b)] = b;  // one request sampling 20000 tokens
  }
  std::vector<int> count(4, 0);
  for (int32_t t : run_sample(be, logits, vocab, sc)) ++count[size_t(t)];
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(count[i] / double(n), probs[i], 0.015) << "token " << i;
}

// ---- threads ----

TEST(CpuOpsThreads, OneAndTwoThreadsAgreeBitwise) {
  cpu::CpuBackend one(1), two(2);
  auto run = [](cpu::CpuBackend& be) {
    std::mt19937 rng(99);
    Vec result;
    PagedCase c(rng, 8, 2, 128, 16, {{40, 90}, {7, 7}, {64, 64}}, true);
    Vec out(size_t(c.tokens() * 8 * 128));
    be.attention_prefill(Tensor::contiguous(out.data(), DType::F32, {c.tokens(), 8, 128}),
                         c.q_view(), c.cache(), c.batch, 0.09f);
    result.insert(result.end(), out.begin(), out.end());
    PagedCase dc(rng, 8, 2, 128, 16, {{1, 90}, {1, 7}, {1, 200}}, false);
    Vec dout(size_t(dc.tokens() * 8 * 128));
    be.attention_decode(Tensor::contiguous(dout.data(), DType::F32, {dc.tokens(), 8, 128}),
                        dc.q_view(), dc.cache(), dc.batch, 0.09f);
    result.insert(result.end(), dout.begin(), dout.end());
    const int64_t t = 111, h = 1000;
    Vec x = random_vec(rng, size_t(t * 2 * h)), y(size_t(t * h));
    be.silu_and_mul(t2(y.data(), DType::F32, t, h), t2(x.data(), DType::F32, t, 2 * h));
    std::vector<uint16_t> w = to_bf16(random_bf16(rng, size_t(h)));
    be.rms_norm(t2(y.data(), DType::F32, t, h), t2(y.data(), DType::F32, t, h),
                t1(w.data(), DType::BF16, h), 1e-6f);
    result.insert(result.end(), y.begin(), y.end());
    std::vector<uint16_t> wl = to_bf16(random_bf16(rng, size_t(300 * h)));
    LinearWeight lw = be.make_linear_weight(t2(wl.data(), DType::BF16, 300, h));
    Vec logits(size_t(t * 300));
    be.linear(t2(logits.data(), DType::F32, t, 300), t2(y.data(), DType::F32, t, h), lw, nullptr);
    result.insert(result.end(), logits.begin(), logits.end());
    SampleCase sc(t);
    for (int64_t b = 0; b < t; ++b) {
      sc.host.temperatures[size_t(b)] = 0.5f * float(b % 3);
      sc.host.seeds[size_t(b)] = uint64_t(b);
    }
    std::vector<int32_t> tokens(static_cast<size_t>(t));
    be.sample(t1(tokens.data(), DType::I32, t), t2(logits.data(), DType::F32, t, 300), sc.batch);
    for (int32_t tok : tokens) result.push_back(float(tok));
    return result;
  };
  const Vec a = run(one), b = run(two);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// The split of a decode step (partitions of a long context) and of a prefill (query blocks,
// key tiles) depends on the batch alone: 1, 2, 3, 4 and 8 threads give the same bits. With fewer
// decode items than threads a sequence's kv heads are split over items (the AVX2 path head by
// head, the AVX-512 path in units of 8 query heads, half a block of lanes), which must not move a
// bit either; under a sliding window too.
TEST(CpuOpsThreads, AttentionSplitsAgreeBitwise) {
  cpu::CpuBackend one(1), two(2), three(3), four(4), eight(8);
  auto run = [](cpu::CpuBackend& be) {
    std::mt19937 rng(7);
    Vec result;
    // Query / kv heads: GQA 2 and 4, and 1 and 8 (48 / 6: on 4 threads the AVX-512 path's units
    // of 8 heads make an item of a block's second half and the next block's first).
    const std::pair<int64_t, int64_t> heads[] = {{16, 8}, {32, 8}, {16, 16}, {48, 6}};
    for (auto [hq, hkv] : heads)
      for (int64_t ctx : {1100, 300, 100})  // 100: short contexts split by heads too
        for (int64_t window : {0, 200}) {
          PagedCase dc(rng, hq, hkv, 128, 16, {{1, ctx}}, false);
          dc.window = window;
          Vec dout(size_t(dc.tokens() * hq * 128));
          be.attention_decode(Tensor::contiguous(dout.data(), DType::F32, {dc.tokens(), hq, 128}),
                              dc.q_view(), dc.cache(), dc.batch, 0.09f);
          result.insert(result.end(), dout.begin(), dout.end());
        }
    PagedCase pc(rng, 16, 8, 128, 256, {{200, 260}}, true);
    Vec pout(size_t(pc.tokens() * 16 * 128));
    be.attention_prefill(Tensor::contiguous(pout.data(), DType::F32, {pc.tokens(), 16, 128}),
                         pc.q_view(), pc.cache(), pc.batch, 0.09f);
    result.insert(result.end(), pout.begin(), pout.end());
    return result;
  };
  const Vec a = run(one);
  for (cpu::CpuBackend* be : {&two, &three, &four, &eight}) {
    const Vec b = run(*be);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << be->pool().size();
  }
}

// The f32 prefill attention's matmuls on zmm (CPUs with AVX-512) compute every element as the
// same chain of FMAs as the ymm ones, so both give the same bits: prompts of 1-300 tokens (rows
// not a multiple of 16 or 32), GQA 2 and 6, head_dim 128 and 64, a sliding window, and decode's
// large-GQA path (group 12, which runs the prefill kernel). On a CPU without AVX-512 both
// backends run the ymm kernel and the comparison holds trivially.
TEST(CpuOpsIsa, PrefillAttentionSameBitsOnZmmAndYmm) {
  cpu::CpuBackend native(2, cpu::CpuIsa::Auto, false), ymm(2, cpu::CpuIsa::AVX2, false);
  auto run = [](cpu::CpuBackend& be) {
    std::mt19937 rng(13);
    Vec result;
    struct Shape {
      int64_t hq, hkv, d, window;
      std::vector<SeqSpec> seqs;
      bool prefill;
    };
    const Shape shapes[] = {{16, 8, 128, 0, {{300, 300}, {37, 90}, {1, 5}}, true},
                            {12, 2, 64, 0, {{77, 77}, {5, 200}}, true},
                            {16, 8, 128, 50, {{130, 260}}, true},
                            {24, 2, 128, 0, {{1, 300}, {1, 70}}, false}};
    for (const Shape& s : shapes) {
      PagedCase c(rng, s.hq, s.hkv, s.d, 16, s.seqs, s.prefill);
      c.window = s.window;
      Vec out(size_t(c.tokens() * s.hq * s.d));
      const Tensor o = Tensor::contiguous(out.data(), DType::F32, {c.tokens(), s.hq, s.d});
      if (s.prefill)
        be.attention_prefill(o, c.q_view(), c.cache(), c.batch, 0.09f);
      else
        be.attention_decode(o, c.q_view(), c.cache(), c.batch, 0.09f);
      result.insert(result.end(), out.begin(), out.end());
    }
    return result;
  };
  const Vec a = run(native), b = run(ymm);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Batch invariance of decode: a sequence's output is the same bits alone as in any batch (the
// partitions of its context depend on its length only), so batching never changes a token.
TEST(CpuOpsBatch, AttentionDecodeDoesNotDependOnTheBatch) {
  cpu::CpuBackend be(2);
  std::mt19937 rng(11);
  // 17 sequences: enough that a batch-dependent split would treat the long ones differently.
  std::vector<SeqSpec> specs = {{1, 1100}, {1, 300}, {1, 700}, {1, 20}, {1, 513}};
  for (int i = 0; i < 12; ++i) specs.push_back({1, 5 + 7 * i});
  PagedCase c(rng, 16, 8, 128, 16, specs, false);
  const int64_t width = 16 * 128;
  Vec all(size_t(c.tokens() * width));
  be.attention_decode(Tensor::contiguous(all.data(), DType::F32, {c.tokens(), 16, 128}), c.q_view(),
                      c.cache(), c.batch, 0.09f);
  for (int b = 0; b < int(c.seqs.size()); ++b) {
    HostBatch one;
    one.is_prefill = false;
    one.max_num_blocks = c.host.max_num_blocks;
    one.block_tables.assign(c.host.block_tables.begin() + b * one.max_num_blocks,
                            c.host.block_tables.begin() + (b + 1) * one.max_num_blocks);
    one.context_lens = {c.host.context_lens[size_t(b)]};
    one.max_seqlen_q = 1;
    one.max_seqlen_k = one.context_lens[0];
    ForwardBatch fb = c.batch;
    fb.host = &one;
    fb.num_seqs = 1;
    fb.num_tokens = 1;
    fb.max_seqlen_k = one.max_seqlen_k;
    Vec alone(static_cast<size_t>(width));
    be.attention_decode(Tensor::contiguous(alone.data(), DType::F32, {1, 16, 128}),
                        c.q_view().slice_rows(b, b + 1), c.cache(), fb, 0.09f);
    EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + b * width, size_t(width) * sizeof(float)))
        << "sequence " << b << " (context " << one.context_lens[0] << ")";
  }
}

}  // namespace
}  // namespace nanovllm
