#pragma once
// LtGemm: bf16 GEMMs through cuBLASLt, out[M, N] = x[M, K] @ w[N, K]^T with f32 accumulation,
// into bf16 or f32. A fixed workspace allocated once (so graph capture allocates nothing); the
// algorithm chosen once per shape by cuBLASLt's heuristic and cached, for the M bucket of
// launch.h's gemm_algo_m (eager and graph-padded batches of one bucket run the same algorithm).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace nanovllm::cuda {

class LtGemm {
 public:
  explicit LtGemm(size_t workspace_bytes = size_t(32) << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // x, w bf16; out bf16 or f32; leading dims (row strides) in elements.
  void run(void* out, bool out_f32, int64_t ldo, const void* x, int64_t ldx, const void* w,
           int64_t m, int64_t n, int64_t k, cudaStream_t stream);

  size_t cached_plans() const { return plans_.size(); }

 private:
  // (m, n, k, ldx, ldo, out_f32, alignment of out, x, w in bytes)
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int, int>;
  struct Plan;
  Plan& plan(const Key& key);
  cublasLtMatmulAlgo_t choose(const Key& key, int64_t heuristic_m);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;  // by the bucketed m
};

}  // namespace nanovllm::cuda
