#pragma once
// ModelRunner: turns scheduled sequences into a ForwardBatch, runs the model, samples
// (nano-vllm's engine/model_runner.py). Owns the KV cache, allocated once from a byte budget.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "runtime/forward_batch.h"
#include "engine/sequence.h"
#include "model/qwen3.h"
#include "nanovllm/config.h"

namespace nanovllm {

class ModelRunner {
 public:
  // Loads the weights of config.model onto the backend and allocates the KV cache.
  ModelRunner(const Config& config, const ModelConfig& model_config, Backend& backend);

  // One step over seqs (as scheduled: prefill chunks or one decode token each). Returns one
  // sampled token per seq (meaningless for a prefill chunk that does not end its prompt).
  std::vector<int32_t> run(const std::vector<Sequence*>& seqs, bool is_prefill);

  // Logits f32 [num_seqs, V] of the last run, on the device (valid until the next run).
  Tensor last_logits() const { return last_logits_; }
  int num_kv_blocks() const { return num_blocks_; }
  size_t kv_block_bytes() const;  // bytes of one block over all layers, k and v
  HostBatch prepare_prefill(const std::vector<Sequence*>& seqs) const;
  HostBatch prepare_decode(const std::vector<Sequence*>& seqs) const;

 private:
  ForwardBatch upload(const HostBatch& host);
  void prepare_block_tables(HostBatch& host, const std::vector<Sequence*>& seqs) const;
  void prepare_sample(HostBatch& host, const std::vector<Sequence*>& seqs) const;
  void allocate_kv_cache(int64_t budget_bytes);

  Config config_;
  ModelConfig model_config_;
  Backend& backend_;
  std::unique_ptr<Qwen3Model> model_;
  int num_blocks_ = 0;
  Buffer kv_cache_buf_;                // [2, layers, num_blocks, block_size, Hkv, D] bf16
  std::vector<LayerKVCache> kv_cache_;
  Buffer metadata_buf_;                // the ForwardBatch tensors
  Buffer sampled_buf_;                 // i32 [max_num_seqs]
  Tensor last_logits_;
};

// The CPU default KV budget when Config::kv_cache_memory is 0: min(4 GiB, 1/4 of free memory).
int64_t default_cpu_kv_cache_bytes();

}  // namespace nanovllm
