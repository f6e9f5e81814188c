#pragma once
// GraphRunner: the decode forward recorded once per batch bucket and replayed (vLLM's
// CUDAGraphRunner, nano-vllm's capture_cudagraph). A graph reads and writes fixed addresses: the
// ForwardBatch tensors (ModelRunner's metadata buffer), the model's workspace and the KV cache,
// all allocated once before capture. ModelRunner refills the metadata in place, then replays.
// Backends without graphs (the CPU) return nullptr from capture_graph, and nothing is captured.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "runtime/forward_batch.h"

namespace nanovllm {

// Decode batch sizes that get a graph: 1, 2, 4, 8, then multiples of 16, and max_num_seqs last.
std::vector<int> graph_buckets(int max_num_seqs);
// The smallest bucket >= num_seqs (num_seqs <= the last bucket).
int bucket_for(const std::vector<int>& buckets, int num_seqs);

class GraphRunner {
 public:
  // Returns the logits f32 [num_seqs, V] of a decode forward over `batch`.
  using Forward = std::function<Tensor(const ForwardBatch& batch)>;
  // Fills the metadata buffers with an all-padding decode batch of `bucket` lanes and returns
  // the ForwardBatch over them.
  using Prepare = std::function<ForwardBatch(int bucket)>;

  // Captures forward() for each bucket, largest first, each after one eager run (so a backend
  // picks its algorithms and scratch outside the capture). Returns false, capturing nothing, when
  // the backend has no graphs: asked first with a graph that only clears `probe` (a small device
  // tensor), so a backend without graphs costs no forward.
  bool capture(Backend& backend, const std::vector<int>& buckets, const Prepare& prepare,
               const Forward& forward, Tensor probe);
  bool has(int bucket) const { return graphs_.count(bucket) != 0; }
  int num_graphs() const { return int(graphs_.size()); }
  int64_t num_replays() const { return num_replays_; }
  // Replays the graph of `bucket` (metadata refilled in place by the caller) and returns its
  // logits f32 [bucket, V] (the same view every replay).
  Tensor replay(int bucket);

 private:
  struct Graph {
    ForwardBatch batch;  // what was captured; its tensors point at the fixed buffers
    Tensor logits;
    std::unique_ptr<DeviceGraph> graph;
  };
  std::map<int, Graph> graphs_;  // map: a Graph's address is stable while its graph lives
  Forward forward_;              // what the graphs record (kept for the record functions)
  int64_t num_replays_ = 0;
};

}  // namespace nanovllm
