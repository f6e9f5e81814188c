#pragma once
// ModelRunner: turns scheduled sequences into a ForwardBatch, runs the model, samples
// (nano-vllm's engine/model_runner.py).
//
// Graph-ready: every per-step buffer is allocated once, at its maximum, before the KV cache:
// the metadata buffer behind ForwardBatch (max_num_batched_tokens tokens, max_num_seqs
// sequences, block tables ceil(max_model_len / block_size) + 1 wide) and the model's workspace.
// Start-up follows nano-vllm: load weights, reserve the workspace, warm up at the largest batch
// (where the device has lazily allocated state to measure), size and allocate the KV cache from
// what is left, then capture the decode graphs (when the backend has them and !enforce_eager).
// Decode batches are padded to a graph bucket when graphs are used (or when asked, for tests).
//
// Tensor parallelism (a communicator of world size > 1): this runner holds one rank's shard
// (model/tp_shard.h) and a KV cache of its share of the KV heads, with a block count every rank
// agrees on (all-reduce MIN). Rank 0's run() sends the step to the other ranks (tp_control.h),
// every rank runs the forward pass, rank 0 gathers the vocab-parallel logits and samples; the
// other ranks run serve_worker(). No graphs are captured then. On CUDA (a rank per GPU), the
// all-reduces and the logits gather run over NCCL on the backend's stream, bootstrapped over the
// host communicator, which still carries the step's metadata. A step that fails on any rank
// after the other ranks were told to run it fails the whole group (the engine then ends every
// request with the error), since the ranks can no longer be kept in step.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "engine/graph_runner.h"
#include "engine/kv_cache_format.h"
#include "engine/sequence.h"
#include "model/qwen3.h"
#include "nanovllm/config.h"
#include "runtime/forward_batch.h"

namespace nanovllm {

// Engine-internal switches, for tests: defaults follow the device.
struct RunnerOptions {
  // Pad decode batches to the graph buckets. Default: only when graphs are captured.
  std::optional<bool> pad_decode;
  // Run the start-up warm-up forwards. Default: on every device but the CPU (the CPU has no lazily
  // allocated device state, and a max_num_batched_tokens prefill there would take long).
  std::optional<bool> warmup;
  // Tensor parallel (threads): makes rank r's backend, r >= 1 (tests inject faults with it).
  // Default: make_backend with the group's threads per rank and device_index r.
  std::function<std::unique_ptr<Backend>(int rank)> rank_backend;
};

// KV cache bytes when Config::kv_cache_memory is 0, from the device's memory after the weights,
// the workspace and the warm-up (`reserved`: bytes allocated but perhaps not yet touched, which
// MemAvailable still counts as free on the CPU).
//  - CUDA: total * gpu_memory_utilization - used (nano-vllm's rule; used = total - free).
//  - CPU: half of MemAvailable - reserved, at most 4 GiB: the other half stays with the OS page
//    cache, other processes and the ops' per-call scratch; 4 GiB holds ~36k tokens of Qwen3-0.6B.
int64_t default_kv_cache_bytes(DeviceKind device, const DeviceMemory& memory,
                               float gpu_memory_utilization, int64_t reserved);

class ModelRunner {
 public:
  // Loads the weights of config.model onto the backend, reserves every buffer, warms up,
  // allocates the KV cache and captures the decode graphs. Throws Error when the cache cannot
  // hold one max_model_len sequence. model_config is the whole model's; with a communicator of
  // world size > 1 this runner loads rank comm->rank()'s shard of it (Error naming a shape that
  // does not divide, before any weight is read).
  ModelRunner(const Config& config, const ModelConfig& model_config, Backend& backend,
              const RunnerOptions& options = {}, Communicator* comm = nullptr);
  ~ModelRunner();

  // One step over seqs (as scheduled: prefill chunks or one decode token each). Returns one
  // sampled token per seq (meaningless for a prefill chunk that does not end its prompt).
  // A mixed step: is_prefill with the first num_decode_seqs seqs decodes (one token each).
  std::vector<int32_t> run(const std::vector<Sequence*>& seqs, bool is_prefill,
                           int num_decode_seqs = 0);

  // Ranks other than 0 of a tensor-parallel group: run the steps rank 0 sends until it says
  // exit (nano-vllm's ModelRunner.loop). Throws what fails (the group is failed with it).
  void serve_worker();
  int tensor_parallel_size() const { return tp_; }

  // Logits f32 [num_seqs, V] of the last run, on the device (valid until the next run).
  Tensor last_logits() const { return last_logits_; }
  // The last run's prompt logprobs (SamplingParams::prompt_logprobs, rank 0): for each row a
  // prefill chunk scored, in order, the index of its sequence in run()'s seqs and the logprobs of
  // the prompt token after that row. A sequence's rows start at its prompt_logprobs.size().
  const std::vector<std::pair<int, StepLogprobs>>& last_prompt_logprobs() const { return prompt_logprobs_; }
  // Seconds the last run() spent building its inputs on the host and copying them to the device
  // (the rest of run() launches or runs the forward, samples and waits for the sampled ids).
  double last_prepare_seconds() const { return prepare_seconds_; }
  // This rank's weights (its shard under tensor parallelism).
  const ModelWeights& weights() const { return model_->weights(); }
  int num_kv_blocks() const { return num_blocks_; }
  DType kv_cache_dtype() const { return kv_format_.dtype; }  // BF16 or F8E4M3
  size_t kv_block_bytes() const;  // bytes of one block over all layers, k and v
  int max_num_blocks_per_seq() const { return max_num_blocks_per_seq_; }
  // Bytes of the buffers reserved before the KV cache (workspace and metadata).
  int64_t reserved_bytes() const;
  bool pads_decode() const { return pad_decode_; }
  const std::vector<int>& graph_buckets() const { return buckets_; }
  const GraphRunner& graphs() const { return graphs_; }
  // The ForwardBatch of the last step (views into the fixed metadata buffer).
  const ForwardBatch& batch() const { return batch_; }

  // Fill the host batch in place for seqs (decode: padded to `padded_seqs` lanes).
  // prepare_prefill: the first num_decode_seqs seqs are decodes of a mixed step.
  const HostBatch& prepare_prefill(const std::vector<Sequence*>& seqs, int num_decode_seqs = 0);
  const HostBatch& prepare_decode(const std::vector<Sequence*>& seqs, int padded_seqs);

 private:
  // The fixed device tensors behind ForwardBatch, at their maximum shapes.
  struct Metadata {
    Tensor input_ids, positions, slot_mapping;       // i32 [max_tokens]
    Tensor cu_seqlens_q, cu_seqlens_k;               // i32 [max_seqs + 1]
    Tensor context_lens, last_token_indices;         // i32 [max_seqs]
    Tensor block_tables;                             // i32 [max_seqs, max_num_blocks_per_seq]
    Tensor temperatures, top_p;                      // f32 [max_seqs]
    Tensor top_k;                                    // i32 [max_seqs]
    Tensor seeds, sample_offsets;                    // i64 [max_seqs]
  };

  void allocate_metadata();
  // host_ -> the metadata buffer; batch_ = views of the step's sizes (with `sampling`: also the
  // sampling fields, which only a rank that samples has)
  void upload(bool sampling = true);
  void prepare_block_tables(const std::vector<Sequence*>& seqs);
  void prepare_sample(const std::vector<Sequence*>& seqs);
  void append_padding_lane();
  // Forward over batch_ (replaying a graph when one matches) and sampling of the first
  // `num_sampled` rows into the returned ids.
  std::vector<int32_t> execute(const std::vector<LayerKVCache>& kv_cache, int num_sampled);
  // Tensor parallel: gathers the ranks' logits f32 [n, V/tp] into [n, V] on rank 0 (returned;
  // an empty tensor elsewhere), through the given buffers (grown as needed).
  Tensor gather_logits(Tensor local, int n, Buffer& gathered_buf, Buffer& full_buf);
  // The logits of host_.logit_rows (every rank), their logprobs into prompt_logprobs_ (rank 0).
  void score_prompt_rows();
  void load_model(const Config& config, const ModelConfig& model_config);
  void warmup_model();
  void allocate_kv_cache();
  void capture_graphs();

  Config config_;
  ModelConfig model_config_;  // what this rank runs: its share of heads, rows and vocab
  int vocab_size_ = 0;         // the whole model's
  Backend& backend_;
  RunnerOptions options_;
  Communicator* comm_ = nullptr;  // tensor parallel: this rank's (host: threads or mpi), for
                                  // the step's metadata; nullptr: one rank
  std::unique_ptr<Communicator> device_comm_;  // CUDA: NCCL on the backend's stream
  Communicator* data_comm_ = nullptr;          // activations and logits: comm_ on the CPU,
                                               // device_comm_ on CUDA
  int tp_ = 1;
  std::unique_ptr<Qwen3Model> model_;
  int max_tokens_ = 0;              // tokens of the largest step
  int max_num_blocks_per_seq_ = 0;  // block table width
  bool pad_decode_ = false;
  std::vector<int> buckets_;
  GraphRunner graphs_;
  int num_blocks_ = 0;
  KvCacheFormat kv_format_;            // element type and per-layer scales of the KV cache
  Buffer kv_cache_buf_;                // [2, layers, num_blocks, block_size, Hkv, D] bf16 or fp8
  std::vector<LayerKVCache> kv_cache_;
  Buffer metadata_buf_;
  Metadata metadata_;
  HostBatch host_;
  ForwardBatch batch_;
  Buffer sampled_buf_;                 // i32 [max_num_seqs]
  Tensor last_logits_;
  // The step's seqs when one has a grammar (else empty): execute() fills their bitmasks while
  // the forward runs (on CUDA the launches are asynchronous), then clears this.
  std::vector<Sequence*> grammar_seqs_;
  Buffer gathered_buf_, full_logits_buf_;  // tensor parallel, rank 0: [tp, B, V/tp], [B, V]
  Buffer prompt_gathered_buf_, prompt_full_buf_;  // the same for the prompt rows' logits
  // Rank 0: per entry of host_.logit_rows, its seq (index in run()'s seqs), the prompt token it
  // scores and how many top logprobs to keep; then the results.
  std::vector<int> prompt_row_seq_;
  std::vector<int32_t> prompt_row_target_, prompt_row_top_;
  std::vector<std::pair<int, StepLogprobs>> prompt_logprobs_;
  double prepare_seconds_ = 0;
};

}  // namespace nanovllm
