#pragma once
// TpWorker: one tensor-parallel rank of a Qwen3/Qwen2 model (CPU backend): its weight shard
// (model/tp_shard.h), its model with the all-reduces on its communicator, and its KV cache of
// num_key_value_heads / tp heads per layer with a block count every rank agrees on (all-reduce
// MIN). Rank 0 owns the step: it broadcasts the HostBatch (broadcast_batch), every rank runs the
// forward pass, and rank 0 gathers the vocab-parallel logits to sample.
//
// The model-level harness of the tests (tests/distributed/tp_model_test, mpi_tp_main): the engine
// itself runs its ranks through ModelRunner and TpGroup (engine/tp_group.h).
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "engine/tp_control.h"
#include "model/hf_config.h"
#include "model/qwen3.h"
#include "runtime/forward_batch.h"

namespace nanovllm {

struct TpWorkerOptions {
  std::string model;            // the checkpoint folder (every rank reads its own slices)
  int max_position = 512;       // RoPE table length
  int max_tokens = 256;         // per step
  int max_seqs = 16;
  int block_size = 16;
  int64_t kv_cache_bytes = 1 << 20;  // this rank's KV budget; the group takes the smallest
};

class TpWorker {
 public:
  // Loads this rank's shard. A rank that fails (missing or corrupt file, bad shape) aborts the
  // communicator, so every rank ends with an Error naming it; a shape that does not divide by
  // the world size is an Error on every rank before any weight is read.
  TpWorker(const TpWorkerOptions& options, Communicator& comm, Backend& backend);

  const ModelConfig& full_config() const { return full_; }
  const ModelConfig& local_config() const { return local_; }
  int64_t num_blocks() const { return num_blocks_; }

  // Runs `batch` (identical on every rank) and returns, on rank 0, the logits of each
  // sequence's last token over the whole vocabulary: f32 [num_seqs * V] row-major. Other ranks
  // return an empty vector.
  std::vector<float> forward(const HostBatch& batch);

 private:
  const TpWorkerOptions options_;
  Communicator& comm_;
  Backend& backend_;
  ModelConfig full_, local_;
  std::unique_ptr<Qwen3Model> model_;
  int64_t num_blocks_ = 0;
  Buffer kv_buffer_;
  std::vector<LayerKVCache> kv_cache_;
  std::vector<float> local_logits_, gathered_;
};

}  // namespace nanovllm
