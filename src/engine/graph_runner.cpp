#include "engine/graph_runner.h"

#include <algorithm>

#include "util/check.h"

namespace nanovllm {

std::vector<int> graph_buckets(int max_num_seqs) {
  NV_CHECK(max_num_seqs >= 1, "max_num_seqs {}", max_num_seqs);
  std::vector<int> buckets;
  for (int b : {1, 2, 4, 8}) {
    if (b < max_num_seqs) buckets.push_back(b);
  }
  for (int b = 16; b < max_num_seqs; b += 16) buckets.push_back(b);
  buckets.push_back(max_num_seqs);
  return buckets;
}

int bucket_for(const std::vector<int>& buckets, int num_seqs) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), num_seqs);
  NV_CHECK(it != buckets.end(), "{} seqs exceed the largest bucket", num_seqs);
  return *it;
}

bool GraphRunner::capture(Backend& backend, const std::vector<int>& buckets,
                          const Prepare& prepare, const Forward& forward, Tensor probe) {
  graphs_.clear();
  if (!backend.capture_graph([&] { backend.fill_zero(probe); })) return false;
  forward_ = forward;
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const int bucket = *it;
    Graph& g = graphs_[bucket];
    g.batch = prepare(bucket);
    g.logits = forward_(g.batch);  // eager warm-up of this shape
    backend.synchronize();
    g.graph = backend.capture_graph([this, &g] { g.logits = forward_(g.batch); });
    if (!g.graph) {
      graphs_.clear();
      return false;
    }
  }
  return true;
}

Tensor GraphRunner::replay(int bucket) {
  auto it = graphs_.find(bucket);
  NV_CHECK(it != graphs_.end(), "no graph for a decode batch of {}", bucket);
  it->second.graph->replay();
  ++num_replays_;
  return it->second.logits;
}

}  // namespace nanovllm
