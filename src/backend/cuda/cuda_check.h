#pragma once
// NV_CUDA_CHECK(op, call): every CUDA runtime call goes through it; a failure throws
// nanovllm::Error naming the backend op, the call and CUDA's message.
#include <cuda_runtime_api.h>

namespace nanovllm::cuda {

[[noreturn]] void cuda_failed(const char* op, const char* call, cudaError_t err);
[[noreturn]] void cublas_failed(const char* op, const char* call, int status);

}  // namespace nanovllm::cuda

#define NV_CUDA_CHECK(op, call)                                                    \
  do {                                                                             \
    const cudaError_t nv_err_ = (call);                                            \
    if (nv_err_ != cudaSuccess) ::nanovllm::cuda::cuda_failed(op, #call, nv_err_); \
  } while (0)

#define NV_CUBLAS_CHECK(op, call)                                                \
  do {                                                                           \
    const int nv_status_ = int(call);                                            \
    if (nv_status_ != 0) ::nanovllm::cuda::cublas_failed(op, #call, nv_status_); \
  } while (0)
