// The sampler: the exact rule of runtime/sampling_rng.h, one sequence per task, sequences split
// over the pool. The token chosen is the one tests/reference/sampler_reference.cpp picks, bit for
// bit (same float expressions, same libm calls); the work is pruned where the outcome cannot
// change:
//   - the race over the whole vocabulary scores only the tokens with d_i >= (the best score so
//     far) - kMaxRaceNoise, starting from the maximum's score (d = 0; above -2.9, so the bound is
//     above -21: it keeps a d array's skipped tail small), as any d scores at most d + 16.7 (u in
//     (0, 1), 23 bits); and of those only the ones whose u can beat that score at their d (a
//     table of race_u_floor by quarters of d);
//   - top-p over the whole vocabulary sorts only the tokens with d_i >= t, t widening from -2 to
//     -54 (then all), until their mass can reach top_p * z: they are the first tokens of the
//     full order, so the cut is the one a full sort finds.
//   - top-k over the whole vocabulary collects candidates above a running bound (the d of the
//     k-th best kept so far, AVX2 compares) and keeps the best k of them: a later token equal to
//     the bound loses its tie to the kept one of lower index, so the set is the full order's.
// The passes over the vocabulary (maximum, first index of the maximum, d, the top-k bound) run
// on AVX2 (the CPU backend's baseline) and give the scalar expressions' values exactly.
// Processing (penalties, bias, masks) touches only the tokens of the sequence's TokenAdjust table.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "runtime/sampling_rng.h"

// After the includes: g++ 13 refuses to inline the standard library's always_inline members
// into code of another target when its headers are read under this pragma.
#pragma GCC target("avx2,fma")

namespace nanovllm::cpu {

namespace {

struct SampleParams {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  int64_t offset;
};

// Higher d first, then lower index.
struct Better {
  const float* d;
  bool operator()(int32_t a, int32_t b) const { return d[a] > d[b] || (d[a] == d[b] && a < b); }
};

// max over i of clean_logit(x[i]) (NaN counts as -inf).
float max_clean(const float* x, int64_t n) {
  __m256 best = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) best = _mm256_max_ps(_mm256_loadu_ps(x + i), best);  // NaN: keeps best
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, best);
  float m = -INFINITY;
  for (float l : lanes) m = l > m ? l : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;  // false for NaN
  return m;
}

// First index of x[i] == m, m one of the x (not NaN).
int32_t first_equal(const float* x, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
    if (mask != 0) return int32_t(i + __builtin_ctz(unsigned(mask)));
  }
  for (; i < n; ++i) {
    if (x[i] == m) return int32_t(i);
  }
  return 0;  // unreachable: m is one of the x
}

// First index of the maximum, NaN counting as -inf (all -inf / NaN: 0).
int32_t argmax(const float* x, int64_t n) {
  const float m = max_clean(x, n);
  return m == -INFINITY ? 0 : first_equal(x, n, m);
}

// d[i] = scaled_logit(clean_logit(y[i]), m, temperature) for i < n; m = max_clean(y) finite or
// +inf. The vector lanes compute the same IEEE subtraction and division as the scalar form.
void scale_all(float* d, const float* y, int64_t n, float m, float temperature) {
  int64_t i = 0;
  if (m != INFINITY) {
    const __m256 mv = _mm256_set1_ps(m), tv = _mm256_set1_ps(temperature);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_loadu_ps(y + i);
      v = _mm256_blendv_ps(ninf, v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> -inf
      _mm256_storeu_ps(d + i, _mm256_div_ps(_mm256_sub_ps(v, mv), tv));
    }
  }
  for (; i < n; ++i) d[i] = scaled_logit(clean_logit(y[i]), m, temperature);
}

// argmax over `kept` of the race score; ties: lowest index.
int32_t race(const float* d, const std::vector<int32_t>& kept, const SampleParams& p) {
  int32_t best = -1;
  float best_s = 0.0f;
  for (int32_t i : kept) {
    const float s = race_score(d[i], sample_uniform(p.seed, p.offset, i));
    if (best < 0 || s > best_s || (s == best_s && i < best)) {
      best = i;
      best_s = s;
    }
  }
  return best;
}

// The least u with which a token of a given d could score `beat` or more, by buckets of d in
// [-21, 0]: bucket k holds d in (-(k + 1) / 4, -k / 4] and the bound of its largest d,
// race_u_floor(beat + k / 4) (race_score(d, u) <= d - log(-log u); the bound's 1e-3 of slack
// covers the rounding of d * 4 and beat + k / 4).
struct RaceUFloors {
  static constexpr int kPerUnit = 4;
  static constexpr int kBuckets = 21 * kPerUnit + 1;
  float u[kBuckets] = {};
  void set(float beat) {
    for (int k = 0; k < kBuckets; ++k) u[k] = race_u_floor(beat + float(k) / kPerUnit);
  }
  float of(float d) const { return u[int(-d * kPerUnit)]; }  // -21 <= d <= 0
};

// The race over the whole vocabulary, pruned (see the top of the file). max(d) == 0 == d[top].
int32_t race_all(const float* d, int64_t v, int32_t top, const SampleParams& p) {
  // The leader so far, starting from the maximum's own score: a token scoring below it loses.
  int32_t best = top;
  float best_s = race_score(0.0f, sample_uniform(p.seed, p.offset, top));
  float d_floor = best_s - kMaxRaceNoise;  // >= -21: best_s > -2.9
  RaceUFloors floors;                      // by d: a smaller u cannot reach best_s
  floors.set(best_s);
  for (int64_t i = 0; i < v; ++i) {
    if (!(d[i] >= d_floor)) continue;
    const float u = sample_uniform(p.seed, p.offset, i);
    if (u < floors.of(d[i])) continue;
    const float s = race_score(d[i], u);
    if (s > best_s || (s == best_s && i < best)) {  // ties: the lower index
      best = int32_t(i);
      best_s = s;
      d_floor = best_s - kMaxRaceNoise;
      floors.set(best_s);
    }
  }
  return best;
}

// The top_k best of `cand` (all of [0, v) when cand is null) by (d desc, index asc), sorted so.
std::vector<int32_t> top_k_indices(const float* d, int64_t v, const std::vector<int32_t>* cand,
                                   int64_t k) {
  Better better{d};
  // Max-heap under `better` = the worst kept element on top.
  std::priority_queue<int32_t, std::vector<int32_t>, Better> heap(better);
  auto offer = [&](int32_t i) {
    if (int64_t(heap.size()) < k) {
      heap.push(i);
    } else if (better(i, heap.top())) {
      heap.pop();
      heap.push(i);
    }
  };
  if (cand) {
    for (int32_t i : *cand) offer(i);
  } else {
    for (int64_t i = 0; i < v; ++i) offer(int32_t(i));
  }
  std::vector<int32_t> out;
  out.reserve(heap.size());
  while (!heap.empty()) {
    out.push_back(heap.top());
    heap.pop();
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// The top_k best of the whole vocabulary [0, v) by (d desc, index asc), sorted so: candidates
// above a running bound (see the top of the file), then top_k_indices over them.
std::vector<int32_t> top_k_all(const float* d, int64_t v, int64_t k, std::vector<int32_t>& buf) {
  const int64_t cap = std::max<int64_t>(4 * k, 2048);
  if (v <= cap) return top_k_indices(d, v, nullptr, k);
  buf.clear();
  int64_t i = 0;
  for (; i < cap; ++i) buf.push_back(int32_t(i));
  // Keeps the best k of buf; returns the d of the k-th (a later token must beat it strictly).
  auto shrink = [&] {
    std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), Better{d});
    buf.resize(size_t(k));
    float worst = d[buf[0]];
    for (int32_t j : buf) worst = std::min(worst, d[j]);
    return worst;
  };
  float bound = shrink();
  for (; i + 8 <= v; i += 8) {
    const __m256 bv = _mm256_set1_ps(bound);
    unsigned mask = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(d + i), bv, _CMP_GT_OQ)));
    while (mask != 0) {
      buf.push_back(int32_t(i + __builtin_ctz(mask)));
      mask &= mask - 1;
    }
    if (int64_t(buf.size()) >= cap) bound = shrink();
  }
  for (; i < v; ++i) {
    if (d[i] > bound) buf.push_back(int32_t(i));
  }
  return top_k_indices(d, v, &buf, k);
}

// Shortest prefix of `sorted` whose cumulative exp(d) reaches top_p * z; false if the whole list
// does not reach it.
bool top_p_cut(const float* d, std::vector<int32_t>& sorted, double z, float top_p) {
  const double target = double(top_p) * z;
  double cum = 0.0;
  for (size_t j = 0; j < sorted.size(); ++j) {
    cum += std::exp(double(d[sorted[j]]));
    if (cum >= target) {
      sorted.resize(j + 1);
      return true;
    }
  }
  return false;
}

// The token of one sequence; y holds its processed logits (step 1) but for NaN, which counts as
// -inf here; d is scratch.  y, d: [v]
int32_t sample_processed(const float* y, int64_t v, const SampleParams& p, std::vector<float>& dbuf,
                         std::vector<int32_t>& cbuf) {
  if (p.temperature == 0.0f) return argmax(y, v);
  const float m = max_clean(y, v);
  if (m == -INFINITY) return 0;  // every logit -inf or NaN
  dbuf.resize(size_t(v));
  float* d = dbuf.data();
  scale_all(d, y, v, m, p.temperature);
  const bool use_min_p = p.min_p > 0.0f;
  const bool use_top_k = p.top_k > 0 && p.top_k < v;
  const bool use_top_p = p.top_p < 1.0f;
  if (!use_min_p && !use_top_k && !use_top_p) return race_all(d, v, first_equal(y, v, m), p);

  std::vector<int32_t> cand;  // min_p's survivors in ascending index order
  if (use_min_p) {
    for (int64_t i = 0; i < v; ++i)
      if (min_p_keeps(d[i], p.min_p)) cand.push_back(int32_t(i));
  }
  const std::vector<int32_t>* cand_ptr = use_min_p ? &cand : nullptr;
  std::vector<int32_t> kept;  // sorted by Better
  if (use_top_k && (!use_min_p || int64_t(cand.size()) > p.top_k)) {
    kept = use_min_p ? top_k_indices(d, v, cand_ptr, p.top_k) : top_k_all(d, v, p.top_k, cbuf);
  } else if (!use_top_p) {
    return race(d, cand, p);  // min_p alone (or top_k keeping all its survivors)
  } else if (use_min_p) {
    kept = cand;
    std::sort(kept.begin(), kept.end(), Better{d});
  }
  if (!use_top_p) return race(d, kept, p);

  if (!kept.empty()) {  // top_k's (or min_p's) set, sorted
    std::vector<int32_t> by_index = kept;
    std::sort(by_index.begin(), by_index.end());
    double z = 0.0;
    for (int32_t i : by_index) z += std::exp(double(d[i]));
    top_p_cut(d, kept, z, p.top_p);  // not reaching top_p * z (rounding): keep them all
    return race(d, kept, p);
  }
  // top_p over the whole vocabulary: the tokens with d >= t are exactly the first ones of the full
  // order, so sort only those, widening t until their mass can reach top_p * z.
  double z = 0.0;
  for (int64_t i = 0; i < v; ++i) z += std::exp(double(d[i]));
  const double target = double(p.top_p) * z;
  for (float t : {-2.0f, -6.0f, -18.0f, -54.0f}) {
    kept.clear();
    double mass = 0.0;
    for (int64_t i = 0; i < v; ++i) {
      if (d[i] >= t) {
        kept.push_back(int32_t(i));
        mass += std::exp(double(d[i]));
      }
    }
    if (mass < target * (1.0 - 1e-9)) continue;  // cannot reach it (beyond rounding)
    std::sort(kept.begin(), kept.end(), Better{d});
    if (top_p_cut(d, kept, z, p.top_p)) return race(d, kept, p);
  }
  // The cut lies in the far tail: sort it all.
  kept.resize(size_t(v));
  for (int64_t i = 0; i < v; ++i) kept[size_t(i)] = int32_t(i);
  std::sort(kept.begin(), kept.end(), Better{d});
  top_p_cut(d, kept, z, p.top_p);
  return race(d, kept, p);
}

}  // namespace

// out[b] = the token the rule of sampling_rng.h picks from logits[b] with seq b's fields
// (HostBatch's temperature / top_k / top_p / seed / offset and its SamplingBatch).
void CpuBackend::sample(Tensor out, Tensor logits, const ForwardBatch& batch) {
  NV_CHECK(logits.ndim == 2 && logits.dtype == DType::F32 && logits.stride[1] == 1 &&
               logits.shape[1] >= 1 && logits.shape[1] <= std::numeric_limits<int32_t>::max(),
           "sample logits {}: expected f32 [B, V]", logits.describe());
  NV_CHECK(out.ndim == 1 && out.dtype == DType::I32 && out.stride[0] == 1 &&
               out.shape[0] == logits.shape[0],
           "sample out {} for logits {}", out.describe(), logits.describe());
  NV_CHECK(batch.host != nullptr, "the CPU backend reads ForwardBatch::host");
  const HostBatch& hb = *batch.host;
  const SamplingBatch& sb = hb.sampling;
  const int64_t num = logits.shape[0], v = logits.shape[1];
  NV_CHECK(int64_t(hb.temperatures.size()) >= num && int64_t(hb.seeds.size()) >= num &&
               int64_t(hb.sample_offsets.size()) >= num &&
               (hb.top_k.empty() || int64_t(hb.top_k.size()) >= num) &&
               (hb.top_p.empty() || int64_t(hb.top_p.size()) >= num),
           "sampling fields for {} seqs: {} temperatures, {} seeds, {} offsets, {} top_k, {} top_p",
           num, hb.temperatures.size(), hb.seeds.size(), hb.sample_offsets.size(), hb.top_k.size(),
           hb.top_p.size());
  parallel_rows(num, 4 * v, [&](int64_t begin, int64_t end) {
    std::vector<float> ybuf, dbuf;
    std::vector<int32_t> cbuf;
    for (int64_t b = begin; b < end; ++b) {
      SampleParams p{hb.temperatures[size_t(b)], hb.top_k.empty() ? 0 : hb.top_k[size_t(b)],
                     hb.top_p.empty() ? 1.0f : hb.top_p[size_t(b)], sb.min_p_of(b),
                     hb.seeds[size_t(b)], hb.sample_offsets[size_t(b)]};
      NV_CHECK(p.temperature >= 0.0f, "temperature {} of seq {}", p.temperature, b);
      const float* x = logits.ptr<const float>() + b * logits.stride[0];
      // Step 1: a copy with the table's tokens adjusted (no table: the logits as they are).
      const float* y = x;
      if (sb.adjusts_begin(b) != sb.adjusts_end(b)) {
        ybuf.assign(x, x + v);
        const float r = sb.repetition_of(b), freq = sb.frequency_of(b), pres = sb.presence_of(b);
        for (const TokenAdjust* a = sb.adjusts_begin(b); a != sb.adjusts_end(b); ++a) {
          NV_CHECK(a->token_id >= 0 && a->token_id < v, "adjusted token {} outside [0, {})",
                   a->token_id, v);
          ybuf[size_t(a->token_id)] = adjust_logit(x[a->token_id], a->masked, a->bias,
                                                   a->in_context, a->output_count, r, freq, pres);
        }
        y = ybuf.data();
      }
      // Step 0, first in effect: a structured output's refused tokens to -inf.
      if (const uint32_t* mask = sb.bitmask_of(b)) {
        NV_CHECK(int64_t(sb.bitmask_words) * 32 >= v, "a bitmask of {} words for {} tokens",
                 sb.bitmask_words, v);
        if (y != ybuf.data()) ybuf.assign(x, x + v);
        for (int64_t t = 0; t < v; ++t)
          if (!((mask[t >> 5] >> (t & 31)) & 1u)) ybuf[size_t(t)] = -INFINITY;
        y = ybuf.data();
      }
      out.ptr<int32_t>()[b] = sample_processed(y, v, p, dbuf, cbuf);
    }
  });
}

}  // namespace nanovllm::cpu
