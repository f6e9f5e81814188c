#pragma once
// CudaBackend: the Backend ops on one NVIDIA GPU. Activations bf16, logits f32, weights bf16
// (row-major: cuBLASLt and the GEMV read them as they are), the KV cache bf16 or fp8 (E4M3 codes
// of x / scale, converted exactly in the attention kernels). All work is
// enqueued on the backend's one stream; metadata is read from ForwardBatch's device tensors
// (so a captured graph replays with whatever the runner refilled), and from ForwardBatch::host
// only for launch sizes of eager steps (prefill) and the sampler's choice of path. Kernels live
// in one .cu per op family (see kernels.h); every CUDA call is checked (cuda_check.h).
//
// KV cache layout (per layer, k and v alike): [num_blocks, block_size, Hkv, D], as the CPU.
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/gemm.h"

namespace nanovllm::cpu {
class CpuBackend;
}

namespace nanovllm::cuda {

class CudaBackend : public Backend {
 public:
  // Throws Error("no CUDA device: ...") when there is no usable GPU with that index.
  explicit CudaBackend(int device_index = 0);
  ~CudaBackend() override;

  DeviceKind device() const override { return DeviceKind::CUDA; }
  std::string describe() const override { return description_; }
  DType activation_dtype() const override { return DType::BF16; }
  cudaStream_t stream() const { return stream_; }
  int device_index() const override { return device_; }
  void* native_stream() const override { return stream_; }

  Buffer alloc(size_t bytes) override;
  void upload(Tensor dst, const void* host) override;
  void download(void* host, Tensor src) override;
  void copy(Tensor dst, Tensor src) override;
  void fill_zero(Tensor dst) override;
  void synchronize() override;
  void profile_window(bool open) override;

  LinearWeight make_linear_weight(Tensor w_host) override;
  // int8 (per row or grouped) and int4 weights, repacked into quant_linear.h's layout; linear()
  // runs them by a W8A16 / W4A16 GEMV for M <= 16, else dequantized to bf16 (dequant_ws_) for
  // cuBLASLt; the embedding lookups dequantize their rows. Another format: Error naming it.
  LinearWeight make_quantized_linear_weight(const QuantizedWeight& w) override;

  void embedding(Tensor out, Tensor ids, const LinearWeight& table) override;
  void vocab_parallel_embedding(Tensor out, Tensor ids, const LinearWeight& table,
                                int64_t vocab_start) override;
  void linear(Tensor out, Tensor x, const LinearWeight& w, const Tensor* bias) override;
  void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) override;
  void add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) override;
  void rope(Tensor x, Tensor positions, Tensor cos_sin) override;
  void silu_and_mul(Tensor out, Tensor x) override;
  void store_kv(Tensor k, Tensor v, const LayerKVCache& cache, const ForwardBatch& batch) override;
  void qk_norm_rope_store_kv(Tensor q, Tensor k, Tensor v, const Tensor* q_norm,
                             const Tensor* k_norm, float eps, Tensor positions, Tensor cos_sin,
                             const LayerKVCache& cache, const ForwardBatch& batch) override;
  void attention_prefill(Tensor out, Tensor q, const LayerKVCache& cache, const ForwardBatch& batch,
                         float scale) override;
  void attention_decode(Tensor out, Tensor q, const LayerKVCache& cache, const ForwardBatch& batch,
                        float scale) override;
  // fused_moe.cpp: router, sort by expert, grouped expert GEMMs and combine, all driven by device
  // data (graph-safe once warmed up); bf16, int8 or int4 experts (quant_linear.h's layout).
  void fused_moe(Tensor out, Tensor x, Tensor router_logits, const MoeWeights& experts, int top_k,
                 bool renormalize) override;
  void gather_rows(Tensor out, Tensor x, Tensor indices) override;
  void sample(Tensor out, Tensor logits, const ForwardBatch& batch) override;

  DeviceMemory memory_info() const override;
  std::unique_ptr<DeviceGraph> capture_graph(const std::function<void()>& record) override;

  // Whether the device sampler serves this batch (else the host sampler does).
  static bool device_sampler_serves(const HostBatch& host, int64_t vocab);

 private:
  void use_device() const;  // makes device_ the calling thread's current device
  bool capturing() const;
  float* decode_workspace(size_t floats);  // grows outside graph capture only
  // attention_decode's per (sequence, kv head) counters, zero (as each launch leaves them).
  int32_t* decode_counters(size_t n);
  // ws, grown to at least `bytes` (outside graph capture only; the old buffer is retired, not
  // freed, as graphs captured before may use it).
  void* grow_workspace(Buffer& ws, size_t bytes, const char* op);
  // The device table of the experts' weight pointers ([2E]: gate_up[0..E), then down[0..E); bf16
  // rows or quantized codes, quant_linear.h), made on first use of `experts` and remade when its
  // weights moved (both outside capture).
  const void* const* moe_weight_table(const MoeWeights& experts, int64_t hidden,
                                      int64_t intermediate);

  int device_ = 0;
  int num_sms_ = 1;
  cudaStream_t stream_ = nullptr;
  std::string description_;
  std::unique_ptr<LtGemm> gemm_;
  Buffer decode_ws_;
  Buffer decode_counters_;
  Buffer moe_ws_;                   // fused_moe's scratch, for the largest chunk seen
  Buffer dequant_ws_;               // linear()'s bf16 chunk of a quantized weight (cuBLASLt path)
  std::vector<Buffer> retired_ws_;  // smaller workspaces that captured graphs may use
  // Per MoeWeights (by address): its experts' pointers on the host (to notice a change) and the
  // device table the grouped GEMMs read. A few KB per sparse layer, kept for the backend's life.
  struct MoeTable {
    std::vector<const void*> host;  // [2E]
    Buffer device;                  // [2E] the same pointers
  };
  std::unordered_map<const MoeWeights*, MoeTable> moe_tables_;
  std::unique_ptr<cpu::CpuBackend> host_sampler_;  // min_p / top-k / top-p / processed logits
  // Structured outputs: the step's bitmask rows then one u32 flag a row, staged on the host and
  // uploaded to mask_buf_ (grown to the largest step seen).
  void apply_token_bitmask(Tensor logits, const SamplingBatch& sampling);
  std::vector<uint32_t> mask_staging_;
  Buffer mask_buf_;
};

}  // namespace nanovllm::cuda
