// The CPU sampler against the reference of the full sampling rule (tests/reference/
// sampler_reference.h): every SamplingParams field that reaches the sampler, numerical edges
// (tiny temperatures, +-inf and NaN logits, odd vocab sizes), batch independence, and logprobs.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "reference/sampler_reference.h"
#include "runtime/forward_batch.h"
#include "runtime/logprobs.h"
#include "runtime/sampling_rng.h"

namespace nanovllm {
namespace {

using Case = ref::SamplingCase;

std::vector<float> random_logits(std::mt19937& rng, int64_t vocab, float lo = -6.0f, float hi = 6.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) x = dist(rng);
  return v;
}

// Samples every row of `rows` (logits [n, vocab]) in one batch with the CPU backend.
std::vector<int32_t> cpu_sample(Backend& be, std::vector<float> logits, int64_t vocab,
                                const std::vector<Case>& cases) {
  const int64_t n = int64_t(cases.size());
  HostBatch host;
  std::vector<std::vector<std::pair<int32_t, float>>> biases(cases.size());
  std::vector<SamplingRow> rows(cases.size());
  for (size_t b = 0; b < cases.size(); ++b) {
    const Case& c = cases[b];
    host.temperatures.push_back(c.temperature);
    host.top_k.push_back(c.top_k);
    host.top_p.push_back(c.top_p);
    host.seeds.push_back(c.seed);
    host.sample_offsets.push_back(c.offset);
    for (auto [t, bias] : c.logit_bias) biases[b].emplace_back(t, std::clamp(bias, -100.0f, 100.0f));
    SamplingRow& r = rows[b];
    r.min_p = c.min_p;
    r.repetition_penalty = c.repetition_penalty;
    r.frequency_penalty = c.frequency_penalty;
    r.presence_penalty = c.presence_penalty;
    r.prompt = c.prompt;
    r.output = c.output;
    r.logit_bias = biases[b];
    r.masked = c.masked;
  }
  build_sampling_batch(host.sampling, rows);
  ForwardBatch batch;
  batch.host = &host;
  batch.num_seqs = int(n);
  std::vector<int32_t> out(size_t(n), -7);
  be.sample(Tensor::contiguous(out.data(), DType::I32, {n}),
            Tensor::contiguous(logits.data(), DType::F32, {n, vocab}), batch);
  return out;
}

std::vector<float> row_of(const std::vector<float>& logits, int64_t vocab, int64_t b) {
  return {logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab};
}

// A random case using every field (each on or off by chance).
Case random_case(std::mt19937& rng, int64_t vocab, uint64_t seed, int64_t offset) {
  std::uniform_int_distribution<int> coin(0, 1), tok(0, int(vocab - 1)), len(0, 40);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Case c;
  const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.7f, 1e-3f};
  c.temperature = temps[rng() % 6];
  if (coin(rng)) c.top_k = 1 + int(rng() % 50);
  if (coin(rng)) c.top_p = 0.05f + 0.9f * unit(rng);
  if (coin(rng)) c.min_p = 0.3f * unit(rng);
  if (coin(rng)) c.repetition_penalty = 0.5f + 1.5f * unit(rng);
  if (coin(rng)) c.frequency_penalty = -2.0f + 4.0f * unit(rng);
  if (coin(rng)) c.presence_penalty = -2.0f + 4.0f * unit(rng);
  if (coin(rng))
    for (int i = 0, k = len(rng) / 4; i < k; ++i) c.logit_bias[tok(rng)] = -150.0f + 300.0f * unit(rng);
  for (int i = 0, k = len(rng); i < k; ++i) c.prompt.push_back(tok(rng));
  for (int i = 0, k = len(rng); i < k; ++i) c.output.push_back(tok(rng) % std::max<int>(1, int(vocab / 4)));
  if (coin(rng))
    for (int i = 0; i < 3; ++i) c.masked.push_back(tok(rng));
  c.seed = seed;
  c.offset = offset;
  return c;
}

TEST(Sampler, EveryFieldMatchesReference) {
  cpu::CpuBackend be(2);
  std::mt19937 rng(7);
  for (int64_t vocab : {1, 2, 7, 33, 1000, 50021}) {
    const int64_t n = vocab >= 50021 ? 24 : 96;
    std::vector<float> logits = random_logits(rng, n * vocab);
    std::vector<Case> cases;
    for (int64_t b = 0; b < n; ++b) cases.push_back(random_case(rng, vocab, 0x1234 + uint64_t(b), b * 3));
    const std::vector<int32_t> got = cpu_sample(be, logits, vocab, cases);
    for (int64_t b = 0; b < n; ++b) {
      EXPECT_EQ(got[size_t(b)], ref::sample(row_of(logits, vocab, b), cases[size_t(b)]))
          << "vocab " << vocab << " row " << b << " T " << cases[size_t(b)].temperature;
    }
  }
}

// Top-k over a large vocabulary whose logits take few distinct values (ties everywhere, in and
// across the running bound of the candidate pass), and argmax / scaling with NaN, +-inf and
// signed zeros, against the reference.
TEST(Sampler, TopKWithManyTiesMatchesReference) {
  cpu::CpuBackend be(2);
  std::mt19937 rng(11);
  const int64_t vocab = 30011;  // odd: the vector passes leave a tail
  // Rising with the index and quantized to 1/16: the best tokens come late (the bound moves
  // many times) and tie in groups; every 4th row takes values from a set of 8 instead.
  const float values[] = {-3.0f, -1.0f, -0.0f, 0.0f, 0.5f, 0.5f, 1.0f, 2.0f};
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> logits(size_t(24 * vocab));
  for (int64_t b = 0; b < 24; ++b) {
    for (int64_t i = 0; i < vocab; ++i) {
      logits[size_t(b * vocab + i)] =
          b % 4 == 3 ? values[rng() % 8] : std::round((8.0f * float(i) / float(vocab) + noise(rng)) * 16.0f) / 16.0f;
    }
  }
  for (int64_t b = 0; b < 24; ++b) {  // sprinkle non-finite values
    logits[size_t(b * vocab + int64_t(rng() % vocab))] = NAN;
    logits[size_t(b * vocab + int64_t(rng() % vocab))] = -INFINITY;
  }
  logits[size_t(5 * vocab + 17)] = INFINITY;
  std::vector<Case> cases;
  const int top_ks[] = {1, 3, 20, 700, 2047, 2048, 2049, 9000};
  const float temps[] = {0.0f, 0.6f, 1e-3f, 1e-40f};
  for (int64_t b = 0; b < 24; ++b) {
    Case c;
    c.temperature = temps[b % 4];
    c.top_k = top_ks[b % 8];
    if (b % 3 == 0) c.top_p = 0.9f;
    c.seed = 99 + uint64_t(b);
    c.offset = b;
    cases.push_back(c);
  }
  const std::vector<int32_t> got = cpu_sample(be, logits, vocab, cases);
  for (int64_t b = 0; b < 24; ++b) {
    EXPECT_EQ(got[size_t(b)], ref::sample(row_of(logits, vocab, b), cases[size_t(b)]))
        << "row " << b << " top_k " << cases[size_t(b)].top_k << " T " << cases[size_t(b)].temperature;
  }
}

// Each field changes the outcome the way it should (and CPU == reference throughout).
struct FieldCheck {
  std::vector<int32_t> cpu, ref;
};
FieldCheck draw(Backend& be, const std::vector<float>& logits, Case c, int num) {
  const int64_t vocab = int64_t(logits.size());
  std::vector<float> rows;
  std::vector<Case> cases;
  for (int i = 0; i < num; ++i) {
    rows.insert(rows.end(), logits.begin(), logits.end());
    c.offset = i;
    cases.push_back(c);
  }
  FieldCheck f;
  f.cpu = cpu_sample(be, rows, vocab, cases);
  for (int i = 0; i < num; ++i) f.ref.push_back(ref::sample(logits, cases[size_t(i)]));
  return f;
}

TEST(Sampler, EachFieldHasItsEffect) {
  cpu::CpuBackend be(2);
  // Token 0 likeliest, then 1, 2, ...: logits 0, -0.5, -1, ...
  const int64_t vocab = 64;
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[size_t(i)] = -0.5f * float(i);
  auto count = [](const std::vector<int32_t>& t, int32_t tok) { return int(std::count(t.begin(), t.end(), tok)); };
  const int num = 400;
  Case base;
  base.seed = 11;

  FieldCheck plain = draw(be, logits, base, num);
  EXPECT_EQ(plain.cpu, plain.ref);
  EXPECT_GT(count(plain.cpu, 0), num / 4);

  Case bias = base;
  bias.logit_bias[40] = 1000.0f;  // clamped to 100: token 40 always
  FieldCheck f = draw(be, logits, bias, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_EQ(count(f.cpu, 40), num);

  Case masked = base;
  masked.masked = {0, 1};
  f = draw(be, logits, masked, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_EQ(count(f.cpu, 0) + count(f.cpu, 1), 0);

  Case rep = base;
  rep.repetition_penalty = 8.0f;  // token 0 (logit 0: multiplied, stays 0) and 2 in the prompt
  rep.prompt = {2, 2};
  rep.output = {3};
  f = draw(be, logits, rep, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_LT(count(f.cpu, 2) + count(f.cpu, 3), count(plain.cpu, 2) + count(plain.cpu, 3));
  Case rep_pos = base;  // a positive logit is divided: 3 / 10 < 1
  std::vector<float> pos = logits;
  pos[0] = 1.0f;
  pos[5] = 3.0f;
  rep_pos.repetition_penalty = 10.0f;
  rep_pos.prompt = {5};
  rep_pos.temperature = 0.0f;
  EXPECT_EQ(draw(be, pos, rep_pos, 1).cpu[0], 0);
  rep_pos.repetition_penalty = 1.0f;
  EXPECT_EQ(draw(be, pos, rep_pos, 1).cpu[0], 5);

  Case freq = base;
  freq.frequency_penalty = 2.0f;
  freq.output = {0, 0, 0};  // token 0 loses 6
  f = draw(be, logits, freq, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_LT(count(f.cpu, 0), num / 50);

  Case pres = base;
  pres.presence_penalty = -2.0f;  // negative: encourages token 9
  pres.output = {9, 9};
  f = draw(be, logits, pres, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_GT(count(f.cpu, 9), count(plain.cpu, 9));

  Case min_p = base;
  min_p.min_p = 0.5f;  // keeps tokens with p >= 0.5 p_max: 0 and 1 (exp(-0.5) = 0.61)
  f = draw(be, logits, min_p, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_EQ(count(f.cpu, 0) + count(f.cpu, 1), num);
  EXPECT_GT(count(f.cpu, 1), num / 5);

  Case top_k = base;
  top_k.top_k = 3;
  f = draw(be, logits, top_k, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_EQ(count(f.cpu, 0) + count(f.cpu, 1) + count(f.cpu, 2), num);
  EXPECT_GT(count(f.cpu, 2), 0);

  Case top_p = base;
  top_p.top_p = 0.5f;  // p0 = 0.39, p0 + p1 = 0.63: keeps 0 and 1
  f = draw(be, logits, top_p, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_EQ(count(f.cpu, 0) + count(f.cpu, 1), num);

  Case hot = base;
  hot.temperature = 5.0f;
  f = draw(be, logits, hot, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_LT(count(f.cpu, 0), count(plain.cpu, 0));

  Case seeded = base;
  seeded.seed = 12;
  f = draw(be, logits, seeded, num);
  EXPECT_EQ(f.cpu, f.ref);
  EXPECT_NE(f.cpu, plain.cpu);
}

// ---- numerical edges (issue 11.4) ----

TEST(Sampler, TinyTemperaturesPickTheArgmax) {
  cpu::CpuBackend be(2);
  std::mt19937 rng(3);
  for (int64_t vocab : {1, 3, 17, 129, 5003}) {
    for (float t : {1e-40f, FLT_TRUE_MIN, FLT_MIN, 1e-30f, 1e-8f}) {
      std::vector<float> logits = random_logits(rng, 16 * vocab, -1000.0f, 1000.0f);
      std::vector<Case> cases(16);
      for (int b = 0; b < 16; ++b) {
        cases[size_t(b)].temperature = t;
        cases[size_t(b)].seed = uint64_t(b);
        cases[size_t(b)].top_p = b % 2 ? 0.9f : 1.0f;
        cases[size_t(b)].min_p = b % 3 ? 0.0f : 0.2f;
      }
      const std::vector<int32_t> got = cpu_sample(be, logits, vocab, cases);
      for (int b = 0; b < 16; ++b) {
        const std::vector<float> row = row_of(logits, vocab, b);
        const int32_t want = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
        EXPECT_EQ(got[size_t(b)], want) << "T " << t << " vocab " << vocab << " row " << b;
        EXPECT_EQ(ref::sample(row, cases[size_t(b)]), want);
      }
    }
  }
}

TEST(Sampler, InfinityAndNaN) {
  cpu::CpuBackend be(2);
  const int64_t vocab = 37;  // odd on purpose
  std::vector<float> base(vocab);
  for (int64_t i = 0; i < vocab; ++i) base[size_t(i)] = std::sin(float(i));
  const float inf = INFINITY, nan = NAN;
  struct Edge {
    const char* name;
    std::vector<std::pair<int, float>> set;  // (index, value)
    bool all = false;                        // every logit set to the first value
  };
  const std::vector<Edge> edges = {
      {"two +inf", {{4, inf}, {30, inf}}},
      {"+inf and NaN", {{4, inf}, {5, nan}, {6, -inf}}},
      {"NaN acts as -inf", {{1, nan}, {2, nan}, {3, 50.0f}}},
      {"-inf", {{3, -inf}, {20, -inf}}},
      {"all -inf", {{0, -inf}}, true},
      {"all NaN", {{0, nan}}, true},
      {"huge", {{2, 3e38f}, {9, -3e38f}, {11, 3.1e38f}}},
  };
  for (const Edge& e : edges) {
    std::vector<float> row = base;
    if (e.all) std::fill(row.begin(), row.end(), e.set[0].second);
    else
      for (auto [i, v] : e.set) row[size_t(i)] = v;
    std::set<int32_t> seen;
    for (float t : {0.0f, 1e-40f, 0.7f, 1e30f}) {
      for (int variant = 0; variant < 4; ++variant) {
        std::vector<float> logits;
        std::vector<Case> cases;
        for (int s = 0; s < 64; ++s) {
          logits.insert(logits.end(), row.begin(), row.end());
          Case c;
          c.temperature = t;
          c.seed = uint64_t(s);
          if (variant == 1) c.top_k = 3;
          if (variant == 2) c.top_p = 0.8f;
          if (variant == 3) {
            c.min_p = 0.1f;
            c.repetition_penalty = 1.3f;
            c.prompt = {4, 5, 1};
            c.logit_bias[30] = -5.0f;
          }
          cases.push_back(c);
        }
        const std::vector<int32_t> got = cpu_sample(be, logits, vocab, cases);
        for (int s = 0; s < 64; ++s) {
          const int32_t tok = got[size_t(s)];
          ASSERT_EQ(tok, ref::sample(row, cases[size_t(s)])) << e.name << " T " << t << " v " << variant;
          ASSERT_TRUE(tok >= 0 && tok < vocab) << e.name;
          const float x = row[size_t(tok)];
          if (e.all) {
            EXPECT_EQ(tok, 0) << e.name << ": defined as token 0";
          } else {
            EXPECT_FALSE(std::isnan(x)) << e.name << ": NaN picked";
            EXPECT_NE(x, -inf) << e.name << ": -inf picked";
          }
          if (e.set[0].second == inf && !e.all) {
            EXPECT_EQ(x, inf) << e.name << " T " << t;
          }
          if (t > 0 && variant == 0) seen.insert(tok);
        }
      }
    }
    if (std::string(e.name) == "two +inf") {
      EXPECT_EQ(seen, (std::set<int32_t>{4, 30})) << "the race runs among the +inf tokens";
    }
  }
}

// A sequence's token is the same alone and inside any batch.
TEST(Sampler, BatchIndependence) {
  cpu::CpuBackend be(2);
  std::mt19937 rng(21);
  const int64_t vocab = 4099;
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t n = 1 + int64_t(rng() % 40);
    std::vector<float> logits = random_logits(rng, n * vocab);
    std::vector<Case> cases;
    for (int64_t b = 0; b < n; ++b) cases.push_back(random_case(rng, vocab, rng(), int64_t(rng() % 1000)));
    const std::vector<int32_t> batched = cpu_sample(be, logits, vocab, cases);
    for (int64_t b = 0; b < n; ++b) {
      const std::vector<int32_t> alone = cpu_sample(be, row_of(logits, vocab, b), vocab, {cases[size_t(b)]});
      EXPECT_EQ(alone[0], batched[size_t(b)]) << "trial " << trial << " row " << b << " of " << n;
    }
  }
}

void expect_logprob(float got, float want) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want);
  } else {
    EXPECT_NEAR(got, want, 1e-5);
  }
}

TEST(Sampler, LogprobsMatchReference) {
  cpu::CpuBackend be(1);
  std::mt19937 rng(5);
  const int64_t vocab = 1001;
  std::vector<float> logits = random_logits(rng, 5 * vocab, -20.0f, 20.0f);
  logits[size_t(1 * vocab + 7)] = NAN;
  logits[size_t(2 * vocab + 3)] = INFINITY;
  logits[size_t(2 * vocab + 900)] = INFINITY;
  std::fill(logits.begin() + 3 * vocab, logits.begin() + 4 * vocab, -INFINITY);
  logits[size_t(4 * vocab + 10)] = logits[size_t(4 * vocab + 11)];  // a tie in the top list
  const std::vector<int32_t> tokens = {17, 7, 3, 0, 11};
  const std::vector<int32_t> num_top = {20, 5, 2, 0, -1};
  std::vector<StepLogprobs> got;
  be.compute_logprobs(Tensor::contiguous(logits.data(), DType::F32, {5, vocab}), tokens, num_top, got);
  ASSERT_EQ(got.size(), 5u);
  for (int b = 0; b < 4; ++b) {
    const StepLogprobs want = ref::logprobs(row_of(logits, vocab, b), tokens[size_t(b)], num_top[size_t(b)]);
    const StepLogprobs& g = got[size_t(b)];
    EXPECT_EQ(g.sampled.token_id, want.sampled.token_id);
    expect_logprob(g.sampled.logprob, want.sampled.logprob);
    EXPECT_EQ(g.rank, want.rank) << "row " << b;
    ASSERT_EQ(g.top.size(), want.top.size()) << "row " << b;
    for (size_t j = 0; j < g.top.size(); ++j) {
      EXPECT_EQ(g.top[j].token_id, want.top[j].token_id) << "row " << b << " top " << j;
      expect_logprob(g.top[j].logprob, want.top[j].logprob);
    }
  }
  EXPECT_EQ(got[1].sampled.logprob, -INFINITY) << "NaN logit: -inf logprob";
  EXPECT_NEAR(got[2].sampled.logprob, std::log(0.5), 1e-6) << "two +inf logits share the mass";
  EXPECT_EQ(got[3].sampled.logprob, -INFINITY);
  EXPECT_TRUE(got[4].top.empty()) << "num_top -1: row skipped";
  double total = 0;
  const std::vector<float> r0 = row_of(logits, vocab, 0);
  for (int64_t i = 0; i < vocab; ++i) total += std::exp(double(compute_logprobs(r0.data(), vocab, int32_t(i), 0).sampled.logprob));
  EXPECT_NEAR(total, 1.0, 1e-4);
}

}  // namespace
}  // namespace nanovllm
