#pragma once
// CpuBackend: the Backend ops on x86-64 (AVX2+FMA required; the GEMM uses AVX-512 BF16 where the
// CPU has it). Activations are f32, weights and the KV cache bf16. All work runs on the
// backend's own ThreadPool; metadata (block tables, lengths, sampling fields) is read from
// ForwardBatch::host. Kernels live in one file per concept: cpu_backend.cpp (memory, linear,
// embedding, gather_rows), norm.cpp, rope.cpp, activation.cpp, kv_cache.cpp,
// attention_prefill.cpp, attention_decode.cpp, moe.cpp, sampler.cpp.
//
// KV cache layout (per layer, k and v alike): [num_blocks, block_size, Hkv, D] bf16, contiguous;
// slot s = block_id * block_size + offset addresses row s of the [num_blocks * block_size,
// Hkv * D] view.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/thread_pool.h"

namespace nanovllm::cpu {

class CpuBackend : public Backend {
 public:
  // num_threads 0 = std::thread::hardware_concurrency(); isa: the kernels to run (nullopt:
  // NANOVLLM_CPU_ISA, isa.h). Throws Error when the CPU cannot run the ISA asked for.
  // prefill_bf16: the bf16 prefill attention (unset: NANOVLLM_PREFILL_ATTENTION, isa.h); it
  // needs AVX-512 BF16 and an isa other than AVX2 (an Error otherwise).
  explicit CpuBackend(int num_threads = 0, std::optional<CpuIsa> isa = std::nullopt,
                      std::optional<bool> prefill_bf16 = std::nullopt);

  DeviceKind device() const override { return DeviceKind::CPU; }
  std::string describe() const override;
  DType activation_dtype() const override { return DType::F32; }
  int num_threads() const { return pool_.size(); }
  GemmIsa gemm_isa() const { return gemm_isa_; }
  QGemmIsa qgemm_isa() const { return qgemm_isa_; }
  // Whether attention_decode may take the AVX-512 kernels (for head_dim 64/128 and a multiple of
  // 16 query heads; other shapes run the AVX2 ones).
  bool decode_avx512() const { return decode_avx512_; }
  // Whether attention_prefill runs its matmuls on AVX-512 BF16 (q and P rounded to bf16, for
  // head_dim a multiple of 16) rather than in f32 on AVX2: opt-in (the constructor).
  bool prefill_bf16() const { return prefill_bf16_; }
  ThreadPool& pool() { return pool_; }

  Buffer alloc(size_t bytes) override;
  void upload(Tensor dst, const void* host) override;
  void download(void* host, Tensor src) override;
  void copy(Tensor dst, Tensor src) override;
  void fill_zero(Tensor dst) override;
  void synchronize() override {}

  LinearWeight make_linear_weight(Tensor w_host) override;
  LinearWeight make_quantized_linear_weight(const QuantizedWeight& w) override;

  void embedding(Tensor out, Tensor ids, const LinearWeight& table) override;
  void vocab_parallel_embedding(Tensor out, Tensor ids, const LinearWeight& table,
                                int64_t vocab_start) override;
  void linear(Tensor out, Tensor x, const LinearWeight& w, const Tensor* bias) override;
  void rms_norm(Tensor out, Tensor x, Tensor weight, float eps) override;           // norm.cpp
  void add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) override;  // norm.cpp
  void rope(Tensor x, Tensor positions, Tensor cos_sin) override;                   // rope.cpp
  void silu_and_mul(Tensor out, Tensor x) override;  // activation.cpp
  void store_kv(Tensor k, Tensor v, const LayerKVCache& cache,
                const ForwardBatch& batch) override;  // kv_cache.cpp
  void attention_prefill(Tensor out, Tensor q, const LayerKVCache& cache, const ForwardBatch& batch,
                         float scale) override;  // attention_prefill(_bf16).cpp
  void attention_decode(Tensor out, Tensor q, const LayerKVCache& cache, const ForwardBatch& batch,
                        float scale) override;  // attention_decode.cpp
  void gather_rows(Tensor out, Tensor x, Tensor indices) override;
  void fused_moe(Tensor out, Tensor x, Tensor router_logits, const MoeWeights& experts, int top_k,
                 bool renormalize) override;  // moe.cpp
  void sample(Tensor out, Tensor logits, const ForwardBatch& batch) override;  // sampler.cpp
  DeviceMemory memory_info() const override;  // /proc/meminfo: MemAvailable, MemTotal

 private:
  // fn(begin, end) over [0, n): on the pool when n * cost_per_item is worth a dispatch, else
  // inline on the caller.
  void parallel_rows(int64_t n, int64_t cost_per_item,
                     const std::function<void(int64_t, int64_t)>& fn);
  // linear on `pool` with its own packing scratch (fused_moe runs one per thread, one expert each).
  void linear_on(ThreadPool& pool, GemmScratch& scratch, Tensor out, Tensor x, const LinearWeight& w,
                 const Tensor* bias);
  // silu_and_mul's rows [begin, end) on the calling thread (activation.cpp).
  static void silu_and_mul_rows(Tensor out, Tensor x, int64_t begin, int64_t end);
  // A single-thread pool and scratch for each of pool_'s threads: fused_moe's expert-parallel path.
  struct ExpertLane {
    ThreadPool pool{1};
    GemmScratch scratch;
  };

  ThreadPool pool_;
  GemmIsa gemm_isa_;
  QGemmIsa qgemm_isa_;
  GemmScratch gemm_scratch_;  // the GEMMs' packed x, grown to the largest step's
  Buffer moe_scratch_;        // fused_moe's gathered rows and expert activations, grown as needed
  std::vector<std::unique_ptr<ExpertLane>> expert_lanes_;  // made on fused_moe's first use
  bool decode_avx512_;
  bool prefill_bf16_;
};

}  // namespace nanovllm::cpu
