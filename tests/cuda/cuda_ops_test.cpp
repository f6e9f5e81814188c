// The CUDA backend's row ops, linear (GEMV and cuBLASLt), sampler and graphs against the fp32
// reference (tests/reference/ops_reference.h): random inputs, odd sizes, strided views,
// NaN-poisoned outputs. Needs a GPU (label cuda); fails with a message without one.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/cuda_fixture.h"
#include "runtime/forward_batch.h"

namespace nanovllm {
namespace {

using ref::Vec;
using test::CudaTest;
using test::expect_close_scaled;
using test::random_bf16;

class CudaOps : public CudaTest {
 protected:
  // The device sampling fields of h's B sequences (h also given as ForwardBatch::host).
  ForwardBatch sampling_batch(HostBatch& h, int64_t B) {
    h.cu_seqlens_q.assign(size_t(B + 1), 0);
    ForwardBatch fb;
    fb.host = &h;
    fb.num_seqs = int(B);
    fb.temperatures = f32(h.temperatures, {B});
    fb.seeds = ints(h.seeds, DType::I64);
    fb.sample_offsets = ints(h.sample_offsets, DType::I64);
    fb.top_k = ints(h.top_k, DType::I32);
    fb.top_p = f32(h.top_p, {B});
    return fb;
  }
};

TEST_F(CudaOps, DescribesTheDeviceAndItsMemory) {
  EXPECT_EQ(be->device(), DeviceKind::CUDA);
  EXPECT_EQ(be->activation_dtype(), DType::BF16);
  EXPECT_NE(be->describe().find("cuda"), std::string::npos) << be->describe();
  const DeviceMemory m = be->memory_info();
  EXPECT_GT(m.total_bytes, int64_t(1) << 30);
  EXPECT_GT(m.free_bytes, 0);
  EXPECT_LE(m.free_bytes, m.total_bytes);
}

TEST_F(CudaOps, EmbeddingAndGatherRowsCopyExactly) {
  for (int64_t hidden : {24, 64, 13 * 2}) {
    const int64_t vocab = 37, T = 9;
    Vec table = random_bf16(rng, size_t(vocab * hidden));
    std::vector<uint16_t> host(table.size());
    for (size_t i = 0; i < table.size(); ++i) host[i] = f32_to_bf16(table[i]);
    LinearWeight w =
        be->make_linear_weight(Tensor::contiguous(host.data(), DType::BF16, {vocab, hidden}));
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = int32_t(rng() % vocab);
    Tensor out = poisoned(DType::BF16, {T, hidden});
    be->embedding(out, ints(ids, DType::I32), w);
    expect_close_scaled(get(out), ref::embedding(ids, table, hidden), 0.0, "embedding");

    std::vector<int32_t> idx = {8, 0, 3, 3};
    Tensor g = poisoned(DType::BF16, {4, hidden});
    be->gather_rows(g, out, ints(idx, DType::I32));
    expect_close_scaled(get(g), ref::gather_rows(get(out), idx, hidden), 0.0, "gather_rows");
  }
}

// One rank's vocab-parallel lookup: its rows for ids in [start, start + rows), zeros over the
// poisoned output for the others (the boundary ids start - 1 and start + rows included); the
// ranks' outputs sum to the whole table's embedding.
TEST_F(CudaOps, VocabParallelEmbeddingZerosOtherRanksIds) {
  const int64_t vocab = 40, hidden = 72, tp = 4, rows = vocab / tp;
  Vec table = random_bf16(rng, size_t(vocab * hidden));
  std::vector<uint16_t> host(table.size());
  for (size_t i = 0; i < table.size(); ++i) host[i] = f32_to_bf16(table[i]);
  std::vector<int32_t> ids = {0, 39, 9, 10, 19, 20, 29, 30, 31, 5, 25, 17};
  const int64_t T = int64_t(ids.size());
  Tensor id_t = ints(ids, DType::I32);
  Vec sum(size_t(T * hidden), 0.0f);
  for (int64_t r = 0; r < tp; ++r) {
    LinearWeight w = be->make_linear_weight(
        Tensor::contiguous(host.data() + r * rows * hidden, DType::BF16, {rows, hidden}));
    Tensor out = poisoned(DType::BF16, {T, hidden});
    be->vocab_parallel_embedding(out, id_t, w, r * rows);
    const Vec got = get(out);
    expect_close_scaled(got, ref::vocab_parallel_embedding(ids, table, hidden, r * rows, rows), 0.0,
                        "vocab_parallel_embedding");
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];
  }
  expect_close_scaled(sum, ref::embedding(ids, table, hidden), 0.0, "sum over ranks");
}

// out = x @ w^T (+ bias) for M on every path (GEMV: 1 on the CUDA cores, 2..16 on the tensor
// cores, rows 9..16 in the mma's upper half; cuBLASLt: more), bf16 and f32 out, x a strided view,
// N not a multiple of 8, K not a multiple of 32 or past one round of the tensor-core GEMV's warps
// (1096); and a row's GEMV result does not depend on M.
TEST_F(CudaOps, LinearMatchesReference) {
  struct Shape {
    int64_t n, k;
  };
  for (Shape s :
       {Shape{40, 64}, Shape{72, 136}, Shape{33, 24}, Shape{1000, 512}, Shape{20, 1096}}) {
    Vec wv = random_bf16(rng, size_t(s.n * s.k));
    std::vector<uint16_t> wh(wv.size());
    for (size_t i = 0; i < wv.size(); ++i) wh[i] = f32_to_bf16(wv[i]);
    LinearWeight w = be->make_linear_weight(Tensor::contiguous(wh.data(), DType::BF16, {s.n, s.k}));
    Vec bias = random_bf16(rng, size_t(s.n));
    Tensor bias_t = bf16(bias, {s.n});
    for (int64_t m : {1, 2, 3, 8, 9, 16, 17, 45}) {
      const int64_t width = s.k + 8;  // x is the first k columns of a wider buffer
      Vec xw = random_bf16(rng, size_t(m * width));
      Tensor xbuf = bf16(xw, {m, width});
      Tensor x = xbuf.slice_last(0, s.k);
      Vec xv;
      for (int64_t r = 0; r < m; ++r)
        xv.insert(xv.end(), xw.begin() + r * width, xw.begin() + r * width + s.k);
      for (bool f32_out : {false, true}) {
        for (bool with_bias : {false, true}) {
          Tensor out = poisoned(f32_out ? DType::F32 : DType::BF16, {m, s.n});
          be->linear(out, x, w, with_bias ? &bias_t : nullptr);
          expect_close_scaled(get(out), ref::linear(xv, wv, with_bias ? bias : Vec{}, m, s.n, s.k),
                              f32_out ? 1e-3 : 1e-2, "linear");
        }
      }
    }
    // GEMV batch invariance: rows of M = 3 equal the first 3 rows of M = 16 bit for bit.
    Vec x16 = random_bf16(rng, size_t(16 * s.k));
    Tensor xt = bf16(x16, {16, s.k});
    Tensor o16 = poisoned(DType::F32, {16, s.n}), o3 = poisoned(DType::F32, {3, s.n});
    be->linear(o16, xt, w, nullptr);
    be->linear(o3, xt.slice_rows(0, 3), w, nullptr);
    Vec a = get(o16), b = get(o3);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin())) << "GEMV rows depend on M";
  }
}

TEST_F(CudaOps, RmsNormAndAddRmsNorm) {
  const float eps = 1e-6f;
  for (int64_t d : {72, 1024, 20}) {
    const int64_t rows = 7;
    Vec x = random_bf16(rng, size_t(rows * d), -2.0f, 2.0f), w = random_bf16(rng, size_t(d));
    Tensor xt = bf16(x, {rows, d}), wt = bf16(w, {d});
    Tensor out = poisoned(DType::BF16, {rows, d});
    be->rms_norm(out, xt, wt, eps);
    expect_close_scaled(get(out), ref::rms_norm(x, w, rows, d, eps), 1e-2, "rms_norm");

    Vec r = random_bf16(rng, size_t(rows * d), -2.0f, 2.0f);
    Tensor rt = bf16(r, {rows, d});
    be->add_rms_norm(xt, rt, wt, eps);
    Vec want_x = x, want_r = r;
    ref::add_rms_norm(want_x, want_r, w, rows, d, eps);
    expect_close_scaled(get(rt), want_r, 1e-2, "add_rms_norm residual");
    expect_close_scaled(get(xt), want_x, 2e-2, "add_rms_norm x");
  }
  // 3-D strided, in place: the q heads of a qkv row.
  const int64_t T = 5, hq = 4, hkv = 2, d = 32, width = (hq + 2 * hkv) * d;
  Vec qkv = random_bf16(rng, size_t(T * width));
  Tensor buf = bf16(qkv, {T, width});
  Tensor q = buf.slice_last(0, hq * d).unflatten_last(hq);
  Vec w = random_bf16(rng, size_t(d));
  be->rms_norm(q, q, bf16(w, {d}), eps);
  Vec got = get(buf), want_q, got_q;
  for (int64_t t = 0; t < T; ++t) {
    want_q.insert(want_q.end(), qkv.begin() + t * width, qkv.begin() + t * width + hq * d);
    got_q.insert(got_q.end(), got.begin() + t * width, got.begin() + t * width + hq * d);
  }
  expect_close_scaled(got_q, ref::rms_norm(want_q, w, T * hq, d, eps), 1e-2, "rms_norm 3-D");
  for (int64_t t = 0; t < T; ++t)  // k and v untouched
    for (int64_t c = hq * d; c < width; ++c)
      ASSERT_EQ(got[size_t(t * width + c)], qkv[size_t(t * width + c)]);
}

TEST_F(CudaOps, RopeAndSiluAndMul) {
  const int64_t T = 6, heads = 3, d = 64, max_pos = 100;
  Vec x = random_bf16(rng, size_t(T * heads * d));
  std::vector<int32_t> pos(T);
  for (auto& p : pos) p = int32_t(rng() % max_pos);
  Vec cs = ref::rope_cos_sin(max_pos, d, 1e6);
  Tensor xt = bf16(x, {T, heads, d});
  be->rope(xt, ints(pos, DType::I32), f32(cs, {max_pos, d}));
  Vec want = x;
  ref::rope(want, pos, cs, heads, d);
  expect_close_scaled(get(xt), want, 1e-2, "rope");

  for (int64_t n : {40, 13}) {
    Vec g = random_bf16(rng, size_t(T * 2 * n), -4.0f, 4.0f);
    Tensor out = poisoned(DType::BF16, {T, n});
    be->silu_and_mul(out, bf16(g, {T, 2 * n}));
    expect_close_scaled(get(out), ref::silu_and_mul(g, T, n), 1e-2, "silu_and_mul");
  }
}

// Device sampler (greedy, temperature) and host path (top-k / top-p) against ref::sample.
// The device sampler (greedy, the race, top-k up to its limit, top-p with and without top-k) and
// the host's (top-k beyond that limit; top-p alone whose nucleus is wider than the device's
// candidates, sent back as -1) pick the reference's token row by row, on rows built to reach
// each branch: random logits, nearly flat ones (a nucleus of most of the vocabulary), values on
// a coarse grid (ties at the top-k boundary, broken by index), a maximum of exactly 0 with a
// -0.0 beside it, -inf and NaN entries.
TEST_F(CudaOps, SampleMatchesReference) {
  const int64_t V = 3000;
  enum Kind { kRandom, kFlat, kGrid, kSigned0, kPeaked };
  struct Row {
    float temperature;
    int32_t top_k;
    float top_p;
    Kind kind;
  };
  const std::vector<std::vector<Row>> batches = {
      // Device only: nothing it could send back.
      {{0.0f, 0, 1.0f, kRandom},
       {0.7f, 0, 1.0f, kRandom},
       {0.7f, 1, 1.0f, kRandom},
       {0.7f, 20, 1.0f, kRandom},
       {0.6f, 20, 0.95f, kRandom},
       {1.3f, 1024, 1.0f, kRandom},
       {1.3f, 1024, 0.9f, kRandom},
       {1.0f, 50, 0.9f, kFlat},
       {0.8f, 7, 1.0f, kGrid},
       {0.8f, 300, 0.6f, kGrid},
       {0.4f, 5, 0.5f, kSigned0},
       {0.9f, 0, 1.0f, kSigned0},
       {0.0f, 0, 1.0f, kSigned0},
       {0.7f, int32_t(V), 1.0f, kRandom},
       {0.7f, 1023, 0.99f, kFlat}},
      // top-p alone: decided on the device where the nucleus fits its candidates, else by the
      // host; beside rows of every other kind.
      {{0.5f, 0, 0.8f, kRandom},
       {0.6f, 0, 0.3f, kRandom},
       {1.0f, 0, 0.9f, kFlat},
       {0.8f, 0, 0.7f, kGrid},
       {0.0f, 0, 0.5f, kRandom},
       {0.7f, 20, 0.95f, kRandom},
       {1.0f, 0, 0.999f, kFlat},
       {0.4f, 0, 0.9f, kSigned0}},
      // top-k beyond the device's limit: the host samples the whole batch.
      {{1.0f, 2000, 1.0f, kRandom}, {0.7f, 20, 0.95f, kRandom}, {0.0f, 0, 1.0f, kGrid}},
      // Logits spread like a trained model's: the race skips most tokens, never the winner.
      {{0.6f, 0, 1.0f, kPeaked},
       {1.0f, 0, 1.0f, kPeaked},
       {2.5f, 0, 1.0f, kPeaked},
       {0.0f, 0, 1.0f, kPeaked},
       {0.7f, 0, 1.0f, kRandom}},
  };
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const std::vector<Row>& rows = batches[bi];
    const int64_t B = int64_t(rows.size());
    Vec logits;
    HostBatch h;
    for (int64_t b = 0; b < B; ++b) {
      const Row& r = rows[size_t(b)];
      Vec x = test::random_vec(rng, size_t(V), -5.0f, 5.0f);
      for (float& v : x) {
        if (r.kind == kFlat) v = 0.002f * v;
        if (r.kind == kGrid) v = 0.5f * std::round(v);
        if (r.kind == kSigned0) v = -std::fabs(v) - 0.25f;
        if (r.kind == kPeaked) v = 6.0f * v;
      }
      if (r.kind == kSigned0) {
        x[33] = -0.0f;
        x[44] = 0.0f;
        x[55] = -INFINITY;
        x[66] = std::nanf("");
      }
      if (b == 0) x[17] = x[400] = 9.0f;  // a tie of the two largest: the lower index leads
      logits.insert(logits.end(), x.begin(), x.end());
      h.temperatures.push_back(r.temperature);
      h.top_k.push_back(r.top_k);
      h.top_p.push_back(r.top_p);
      h.seeds.push_back(uint64_t(1000 + 37 * bi + b));
      h.sample_offsets.push_back(int64_t(7 * b));
    }
    const ForwardBatch fb = sampling_batch(h, B);
    Tensor out = poisoned(DType::I32, {B});
    be->sample(out, f32(logits, {B, V}), fb);
    std::vector<int32_t> got = get_i32(out);
    for (int64_t b = 0; b < B; ++b) {
      const Row& r = rows[size_t(b)];
      Vec row(logits.begin() + b * V, logits.begin() + (b + 1) * V);
      EXPECT_EQ(got[size_t(b)], ref::sample(row, r.temperature, r.top_k, r.top_p,
                                            h.seeds[size_t(b)], h.sample_offsets[size_t(b)]))
          << "batch " << bi << " row " << b << ": temperature " << r.temperature << ", top_k "
          << r.top_k << ", top_p " << r.top_p << ", kind " << int(r.kind);
    }
    if (rows[0].temperature == 0.0f) {
      EXPECT_EQ(got[0], 17);
    }
  }
}

// The exponential race, which skips the tokens too far below the argmax's score to win and those
// whose uniform is too small to beat the best score seen, picks the reference's token for many
// seeds, on rows from 16-byte-aligned (float4 loads) and not (V odd: one float at a time), logits
// spread from flat to peaked, and near the skipping bound. (Raising the uniform's bound by 0.3 of
// a score fails it.)
TEST_F(CudaOps, SampleRaceSkipsOnlyTokensThatCannotWin) {
  const int64_t V = 3001, B = 24;
  Vec logits;
  HostBatch h;
  for (int64_t b = 0; b < B; ++b) {
    const float spread = 0.5f * float(1 + b % 8);  // up to +-20 logits
    Vec x = test::random_vec(rng, size_t(V), -spread * 5.0f, spread * 5.0f);
    if (b % 3 == 0) x[size_t(b * 97 % V)] = 40.0f;  // one token far ahead
    if (b % 3 == 1) {  // a few tokens right at the bound below the leader: d = -16.5 .. -17.5
      x[5] = 30.0f;
      for (int j = 0; j < 200; ++j) x[size_t(100 + j)] = 30.0f - 0.6f * (16.5f + j / 200.0f);
    }
    logits.insert(logits.end(), x.begin(), x.end());
    h.temperatures.push_back(b % 3 == 1 ? 0.6f : 0.3f + 0.1f * float(b % 12));
    h.top_k.push_back(0);
    h.top_p.push_back(1.0f);
    h.seeds.push_back(uint64_t(77 + 13 * b));
    h.sample_offsets.push_back(int64_t(3 * b));
  }
  const ForwardBatch fb = sampling_batch(h, B);
  Tensor out = poisoned(DType::I32, {B});
  be->sample(out, f32(logits, {B, V}), fb);
  std::vector<int32_t> got = get_i32(out);
  for (int64_t b = 0; b < B; ++b) {
    Vec row(logits.begin() + b * V, logits.begin() + (b + 1) * V);
    EXPECT_EQ(got[size_t(b)], ref::sample(row, h.temperatures[size_t(b)], 0, 1.0f,
                                          h.seeds[size_t(b)], h.sample_offsets[size_t(b)]))
        << "row " << b;
  }
}

// Structured outputs: a batch whose only processing is a token bitmask is sampled on the device
// (the mask applied in place first): each row's token is the reference's on its logits with every
// disallowed token at -inf. Unmasked rows beside them are untouched; a row's best token is
// disallowed so the mask has to act; top-p alone over a wide nucleus still goes to the host.
TEST_F(CudaOps, SampleAppliesTheTokenBitmask) {
  const int64_t V = 3000, words = (V + 31) / 32;
  struct Row {
    float temperature;
    int32_t top_k;
    float top_p;
    bool masked;
  };
  const std::vector<Row> rows = {{0.0f, 0, 1.0f, true},   {0.0f, 0, 1.0f, false},
                                 {0.8f, 0, 1.0f, true},   {0.7f, 20, 1.0f, true},
                                 {0.6f, 40, 0.9f, true},  {1.0f, 0, 0.999f, true},
                                 {0.9f, 0, 1.0f, false},  {0.5f, 0, 0.8f, true}};
  const int64_t B = int64_t(rows.size());
  Vec logits;
  HostBatch h;
  h.sampling.bitmask_words = int32_t(words);
  h.sampling.bitmask.assign(size_t(B * words), 0);
  h.sampling.has_bitmask.assign(size_t(B), 0);
  std::vector<Vec> expected_rows;
  for (int64_t b = 0; b < B; ++b) {
    const Row& r = rows[size_t(b)];
    Vec x = test::random_vec(rng, size_t(V), -5.0f, 5.0f);
    if (b == 5) for (float& v : x) v *= 0.002f;  // flat: the nucleus outgrows the device's
    x[123] = 12.0f;                                // the best token, disallowed where masked
    Vec masked = x;
    if (r.masked) {
      h.sampling.has_bitmask[size_t(b)] = 1;
      uint32_t* row = h.sampling.bitmask.data() + b * words;
      for (int64_t t = 0; t < V; ++t) {
        const bool allowed = t != 123 && (rng() % 10 < 3 || t == 2999);
        if (allowed) row[t / 32] |= 1u << (t % 32);
        else masked[size_t(t)] = -INFINITY;
      }
      row[words - 1] |= 0xff000000u;  // bits past the vocabulary are ignored
    }
    logits.insert(logits.end(), x.begin(), x.end());
    expected_rows.push_back(masked);
    h.temperatures.push_back(r.temperature);
    h.top_k.push_back(r.top_k);
    h.top_p.push_back(r.top_p);
    h.seeds.push_back(uint64_t(500 + b));
    h.sample_offsets.push_back(int64_t(3 * b));
  }
  ASSERT_FALSE(h.sampling.processes_logits());
  const ForwardBatch fb = sampling_batch(h, B);
  Tensor out = poisoned(DType::I32, {B});
  Tensor dev_logits = f32(logits, {B, V});
  be->sample(out, dev_logits, fb);
  const std::vector<int32_t> got = get_i32(out);
  // The device applied the masks in place (the host path would have left the logits as they were).
  const Vec after = get(dev_logits);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < V; ++t)
      ASSERT_EQ(after[size_t(b * V + t)], expected_rows[size_t(b)][size_t(t)]) << "row " << b << " token " << t;
  for (int64_t b = 0; b < B; ++b) {
    const Row& r = rows[size_t(b)];
    EXPECT_EQ(got[size_t(b)], ref::sample(expected_rows[size_t(b)], r.temperature, r.top_k,
                                          r.top_p, h.seeds[size_t(b)], h.sample_offsets[size_t(b)]))
        << "row " << b << ": temperature " << r.temperature << ", top_k " << r.top_k
        << ", top_p " << r.top_p << ", masked " << r.masked;
    if (r.masked) {
      const uint32_t word = h.sampling.bitmask[size_t(b * words + got[size_t(b)] / 32)];
      EXPECT_TRUE((word >> (got[size_t(b)] % 32)) & 1u) << "row " << b << " sampled a disallowed token";
    }
  }
  EXPECT_EQ(got[0] == 123, false);
  EXPECT_EQ(got[1], 123);  // unmasked greedy keeps its best token
}

// A captured graph replays the recorded ops on the buffers' new contents, equal to eager.
TEST_F(CudaOps, GraphReplayEqualsEager) {
  const int64_t m = 4, k = 64, n = 48;
  Vec wv = random_bf16(rng, size_t(n * k));
  std::vector<uint16_t> wh(wv.size());
  for (size_t i = 0; i < wv.size(); ++i) wh[i] = f32_to_bf16(wv[i]);
  LinearWeight w = be->make_linear_weight(Tensor::contiguous(wh.data(), DType::BF16, {n, k}));
  Tensor norm_w = bf16(random_bf16(rng, size_t(k)), {k});
  Tensor x = alloc(DType::BF16, {m, k}), h = alloc(DType::BF16, {m, k});
  Tensor y = alloc(DType::F32, {m, n});
  auto record = [&] {
    be->rms_norm(h, x, norm_w, 1e-6f);
    be->linear(y, h, w, nullptr);
  };
  std::vector<uint16_t> xin(static_cast<size_t>(m * k));
  for (auto& v : xin) v = f32_to_bf16(test::random_vec(rng, 1)[0]);
  be->upload(x, xin.data());
  record();  // warm-up: cuBLASLt plans and workspaces before capture
  std::unique_ptr<DeviceGraph> g = be->capture_graph(record);
  ASSERT_NE(g, nullptr);
  for (int round = 0; round < 3; ++round) {
    for (auto& v : xin) v = f32_to_bf16(test::random_vec(rng, 1)[0]);
    be->upload(x, xin.data());
    record();
    Vec eager = get(y);
    be->upload(y, Vec(size_t(m * n), -7.0f).data());
    g->replay();
    Vec replayed = get(y);
    EXPECT_EQ(replayed, eager) << "round " << round;
  }
}

TEST_F(CudaOps, RegistryErrorsAreClear) {
  BackendOptions o;
  o.device = "cuda";
  o.device_index = 99;
  try {
    make_backend(o);
    FAIL() << "device 99 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
