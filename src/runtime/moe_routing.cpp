#include "runtime/moe_routing.h"

#include <cmath>

namespace nanovllm {

void moe_route(const float* logits, int num_experts, int top_k, bool renormalize, int32_t* ids,
               float* weights) {
  float max = logits[0];
  for (int e = 1; e < num_experts; ++e) max = std::fmax(max, logits[e]);
  float sum = 0;
  for (int e = 0; e < num_experts; ++e) sum += std::exp(logits[e] - max);
  // Selection: k passes over E (k <= 8 and E <= 128 in the models we load: cheaper than a sort).
  float picked_sum = 0;
  for (int j = 0; j < top_k; ++j) {
    int best = -1;
    for (int e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= ids[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ids[j] = best;
    weights[j] = std::exp(logits[best] - max) / sum;
    picked_sum += weights[j];
  }
  if (renormalize)
    for (int j = 0; j < top_k; ++j) weights[j] /= picked_sum;
}

}  // namespace nanovllm
