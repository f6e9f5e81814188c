// The sampler: the exact rule of runtime/sampling_rng.h, one sequence per task, sequences split
// over the pool. The token chosen is the one tests/reference/ops_reference.cpp picks, bit for bit
// (same float expressions, same libm calls); the work is pruned where the outcome cannot change:
//   - the race over the whole vocabulary scores only l_i >= max(l) - 21 (the score
//     l_i - log(-log(u_i)) lies within [l_i - 2.86, l_i + 16.7] for u_i in (0, 1)), plus any
//     i whose u_i rounds to 1.0 (an infinite score: sample_uniform can return exactly 1.0);
//   - top-p over the whole vocabulary sorts only l_i >= max(l) - 40 unless the cut needs more.
#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "runtime/sampling_rng.h"

namespace nanovllm::cpu {

namespace {

struct SampleParams {
  float temperature;
  int32_t top_k;
  float top_p;
  uint64_t seed;
  int64_t offset;
};

// Higher l first, then lower index.
struct Better {
  const float* l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

// The race score of index i (exactly as the reference computes it).
float race_score(float l, float u) {
  const float e = -std::log(u);
  return l - std::log(e);
}

// argmax over `kept` of the race score; ties: lowest index.
int32_t race(const float* l, const std::vector<int32_t>& kept, const SampleParams& p) {
  int32_t best = -1;
  float best_s = 0.0f;
  for (int32_t i : kept) {
    const float s = race_score(l[i], sample_uniform(p.seed, p.offset, i));
    if (best < 0 || s > best_s || (s == best_s && i < best)) {
      best = i;
      best_s = s;
    }
  }
  return best;
}

// The race over the whole vocabulary, pruned (see the top of the file).
int32_t race_all(const float* l, int64_t v, const SampleParams& p) {
  const float m = l[argmax(l, v)];
  const float threshold = m - 21.0f;
  int32_t best = -1;
  float best_s = 0.0f;
  for (int64_t i = 0; i < v; ++i) {
    const float u = sample_uniform(p.seed, p.offset, i);
    if (!(l[i] >= threshold) && u < 1.0f) continue;
    const float s = race_score(l[i], u);
    if (best < 0 || s > best_s) {  // ascending i: ties keep the lower index
      best = int32_t(i);
      best_s = s;
    }
  }
  return best < 0 ? argmax(l, v) : best;
}

// The top_k best indices by (l desc, index asc), sorted that way.
std::vector<int32_t> top_k_indices(const float* l, int64_t v, int64_t k) {
  Better better{l};
  // Max-heap under `better` = the worst kept element on top.
  std::priority_queue<int32_t, std::vector<int32_t>, Better> heap(better);
  for (int64_t i = 0; i < v; ++i) {
    if (int64_t(heap.size()) < k) {
      heap.push(int32_t(i));
    } else if (better(int32_t(i), heap.top())) {
      heap.pop();
      heap.push(int32_t(i));
    }
  }
  std::vector<int32_t> out;
  out.reserve(size_t(k));
  while (!heap.empty()) {
    out.push_back(heap.top());
    heap.pop();
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Shortest prefix of `sorted` whose cumulative probability reaches top_p * z (probabilities
// exp(l - m) in double, m = l[sorted[0]]); false if the whole list does not reach it.
bool top_p_cut(const float* l, std::vector<int32_t>& sorted, double m, double z, float top_p) {
  const double target = double(top_p) * z;
  double cum = 0.0;
  for (size_t j = 0; j < sorted.size(); ++j) {
    cum += std::exp(double(l[sorted[j]]) - m);
    if (cum >= target) {
      sorted.resize(j + 1);
      return true;
    }
  }
  return false;
}

int32_t sample_one(const float* logits, int64_t v, const SampleParams& p,
                   std::vector<float>& lbuf) {
  if (p.temperature == 0.0f) return argmax(logits, v);
  lbuf.resize(size_t(v));
  float* l = lbuf.data();
  for (int64_t i = 0; i < v; ++i) l[i] = logits[i] / p.temperature;
  const bool use_top_k = p.top_k > 0 && p.top_k < v;
  const bool use_top_p = p.top_p < 1.0f;
  if (!use_top_k && !use_top_p) return race_all(l, v, p);

  std::vector<int32_t> kept;  // sorted by Better
  if (use_top_k) kept = top_k_indices(l, v, p.top_k);
  if (use_top_p) {
    if (use_top_k) {
      std::vector<int32_t> by_index = kept;
      std::sort(by_index.begin(), by_index.end());
      const double m = l[kept[0]];
      double z = 0.0;
      for (int32_t i : by_index) z += std::exp(double(l[i]) - m);
      top_p_cut(l, kept, m, z, p.top_p);  // not reaching top_p * z (rounding): keep them all
    } else {
      const int32_t top = argmax(l, v);
      const double m = l[top];
      double z = 0.0;
      for (int64_t i = 0; i < v; ++i) z += std::exp(double(l[i]) - m);
      const float threshold = l[top] - 40.0f;
      for (int64_t i = 0; i < v; ++i)
        if (l[i] >= threshold) kept.push_back(int32_t(i));
      std::sort(kept.begin(), kept.end(), Better{l});
      if (!top_p_cut(l, kept, m, z, p.top_p)) {  // the cut lies in the far tail: sort it all
        kept.resize(size_t(v));
        for (int64_t i = 0; i < v; ++i) kept[size_t(i)] = int32_t(i);
        std::sort(kept.begin(), kept.end(), Better{l});
        top_p_cut(l, kept, m, z, p.top_p);
      }
    }
  }
  return race(l, kept, p);
}

}  // namespace

// out[b] = the token the rule of sampling_rng.h picks from logits[b] with seq b's parameters
// (temperature 0: logits[b].argmax(); else top-k, top-p, then the exponential race).
void CpuBackend::sample(Tensor out, Tensor logits, const ForwardBatch& batch) {
  NV_CHECK(logits.ndim == 2 && logits.dtype == DType::F32 && logits.stride[1] == 1 &&
               logits.shape[1] >= 1 && logits.shape[1] <= std::numeric_limits<int32_t>::max(),
           "sample logits {}: expected f32 [B, V]", logits.describe());
  NV_CHECK(out.ndim == 1 && out.dtype == DType::I32 && out.stride[0] == 1 &&
               out.shape[0] == logits.shape[0],
           "sample out {} for logits {}", out.describe(), logits.describe());
  NV_CHECK(batch.host != nullptr, "the CPU backend reads ForwardBatch::host");
  const HostBatch& hb = *batch.host;
  const int64_t num = logits.shape[0], v = logits.shape[1];
  NV_CHECK(int64_t(hb.temperatures.size()) >= num && int64_t(hb.seeds.size()) >= num &&
               int64_t(hb.sample_offsets.size()) >= num &&
               (hb.top_k.empty() || int64_t(hb.top_k.size()) >= num) &&
               (hb.top_p.empty() || int64_t(hb.top_p.size()) >= num),
           "sampling fields for {} seqs: {} temperatures, {} seeds, {} offsets, {} top_k, {} top_p",
           num, hb.temperatures.size(), hb.seeds.size(), hb.sample_offsets.size(), hb.top_k.size(),
           hb.top_p.size());
  parallel_rows(num, 4 * v, [&](int64_t begin, int64_t end) {
    std::vector<float> lbuf;
    for (int64_t b = begin; b < end; ++b) {
      SampleParams p{hb.temperatures[size_t(b)], hb.top_k.empty() ? 0 : hb.top_k[size_t(b)],
                     hb.top_p.empty() ? 1.0f : hb.top_p[size_t(b)], hb.seeds[size_t(b)],
                     hb.sample_offsets[size_t(b)]};
      NV_CHECK(p.temperature >= 0.0f, "temperature {} of seq {}", p.temperature, b);
      out.ptr<int32_t>()[b] =
          sample_one(logits.ptr<const float>() + b * logits.stride[0], v, p, lbuf);
    }
  });
}

}  // namespace nanovllm::cpu
