#include "runtime/logprobs.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace nanovllm {

StepLogprobs compute_logprobs(const float* logits, int64_t vocab, int32_t token, int num_top) {
  auto clean = [](float x) { return x != x ? -INFINITY : x; };
  float m = -INFINITY;
  int64_t num_inf = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float x = clean(logits[i]);
    m = std::max(m, x);
    num_inf += x == INFINITY;
  }
  // logprob(x) for a raw logit x.
  double log_z = 0.0;
  if (m == INFINITY) {
    log_z = std::log(double(num_inf));
  } else if (m > -INFINITY) {
    double z = 0.0;
    for (int64_t i = 0; i < vocab; ++i) z += std::exp(double(clean(logits[i])) - double(m));
    log_z = std::log(z);
  }
  auto logprob = [&](float raw) -> float {
    const float x = clean(raw);
    if (m == -INFINITY) return -INFINITY;
    if (m == INFINITY) return x == INFINITY ? float(-log_z) : -INFINITY;
    return float(double(x) - double(m) - log_z);
  };
  StepLogprobs out;
  const float own = clean(logits[token]);
  out.sampled = {token, logprob(logits[token])};
  int rank = 1;
  for (int64_t i = 0; i < vocab; ++i) rank += clean(logits[i]) > own;
  out.rank = rank;
  const int64_t k = std::clamp<int64_t>(num_top, 0, vocab);
  if (k > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) idx[size_t(i)] = int32_t(i);
    auto better = [&](int32_t a, int32_t b) {
      const float xa = clean(logits[a]), xb = clean(logits[b]);
      return xa > xb || (xa == xb && a < b);
    };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
    for (int64_t j = 0; j < k; ++j) out.top.push_back({idx[size_t(j)], logprob(logits[idx[size_t(j)]])});
  }
  return out;
}

}  // namespace nanovllm
