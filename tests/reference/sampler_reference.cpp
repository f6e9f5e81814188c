#include "reference/sampler_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/sampling_rng.h"

namespace nanovllm::ref {

std::vector<float> process_logits(const std::vector<float>& logits, const SamplingCase& c) {
  std::map<int32_t, int> count;
  for (int32_t t : c.output) ++count[t];
  std::vector<bool> in_context(logits.size(), false);
  for (int32_t t : c.prompt) in_context[size_t(t)] = true;
  for (int32_t t : c.output) in_context[size_t(t)] = true;
  std::vector<float> y(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    float v = logits[i];
    if (v != v) v = -INFINITY;  // NaN counts as -inf
    if (std::find(c.masked.begin(), c.masked.end(), int32_t(i)) != c.masked.end()) v = -INFINITY;
    auto b = c.logit_bias.find(int32_t(i));
    if (b != c.logit_bias.end()) v = v + std::clamp(b->second, -100.0f, 100.0f);
    if (in_context[i] && c.repetition_penalty != 1.0f) {
      v = v > 0.0f ? v / c.repetition_penalty : v * c.repetition_penalty;
    }
    auto n = count.find(int32_t(i));
    if (n != count.end()) {
      v = v - c.frequency_penalty * float(n->second);
      v = v - c.presence_penalty;
    }
    y[i] = v;
  }
  return y;
}

int32_t sample(const std::vector<float>& logits, const SamplingCase& c) {
  const std::vector<float> y = process_logits(logits, c);
  const size_t vocab = y.size();
  const float m = *std::max_element(y.begin(), y.end());
  if (c.temperature == 0.0f || m == -INFINITY) {
    return int32_t(std::max_element(y.begin(), y.end()) - y.begin());  // first maximum
  }
  std::vector<float> d(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    if (m == INFINITY) {
      d[i] = y[i] == INFINITY ? 0.0f : -INFINITY;
    } else {
      d[i] = (y[i] - m) / c.temperature;
    }
  }
  std::vector<int32_t> kept(vocab);
  std::iota(kept.begin(), kept.end(), 0);
  std::stable_sort(kept.begin(), kept.end(),
                   [&](int32_t a, int32_t b) { return d[size_t(a)] > d[size_t(b)]; });
  if (c.min_p > 0.0f) {
    std::vector<int32_t> k2;
    for (int32_t i : kept)
      if (std::exp(double(d[size_t(i)])) >= double(c.min_p)) k2.push_back(i);
    kept = k2;
  }
  if (c.top_k > 0 && size_t(c.top_k) < kept.size()) kept.resize(size_t(c.top_k));
  if (c.top_p < 1.0f) {
    std::vector<int32_t> by_index = kept;
    std::sort(by_index.begin(), by_index.end());
    double z = 0.0;
    for (int32_t i : by_index) z += std::exp(double(d[size_t(i)]));
    double cum = 0.0;
    for (size_t j = 0; j < kept.size(); ++j) {
      cum += std::exp(double(d[size_t(kept[j])]));
      if (cum >= double(c.top_p) * z) {
        kept.resize(j + 1);
        break;
      }
    }
  }
  std::sort(kept.begin(), kept.end());
  int32_t best = kept[0];
  float best_score = 0.0f;
  for (size_t j = 0; j < kept.size(); ++j) {
    const int32_t i = kept[j];
    const float u = sample_uniform(c.seed, c.offset, i);
    const float score = d[size_t(i)] - std::log(-std::log(u));
    if (j == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

StepLogprobs logprobs(const std::vector<float>& logits, int32_t token, int num_top) {
  std::vector<double> x(logits.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = logits[i] != logits[i] ? -INFINITY : logits[i];
  const double m = *std::max_element(x.begin(), x.end());
  std::vector<double> lp(x.size());
  if (m == -INFINITY) {
    std::fill(lp.begin(), lp.end(), -INFINITY);
  } else if (m == INFINITY) {
    const double n = double(std::count(x.begin(), x.end(), INFINITY));
    for (size_t i = 0; i < x.size(); ++i) lp[i] = x[i] == INFINITY ? -std::log(n) : -INFINITY;
  } else {
    double z = 0.0;
    for (double v : x) z += std::exp(v - m);
    for (size_t i = 0; i < x.size(); ++i) lp[i] = x[i] - m - std::log(z);
  }
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return x[size_t(a)] > x[size_t(b)]; });
  StepLogprobs out;
  out.sampled = {token, float(lp[size_t(token)])};
  out.rank = 1 + int(std::count_if(x.begin(), x.end(), [&](double v) { return v > x[size_t(token)]; }));
  for (int j = 0; j < num_top && size_t(j) < order.size(); ++j) {
    out.top.push_back({order[size_t(j)], float(lp[size_t(order[size_t(j)])])});
  }
  return out;
}

}  // namespace nanovllm::ref
