// The backend registry: the one place that knows which backends exist.
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#if defined(NANOVLLM_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace nanovllm {

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.device == "cpu") {
    if (options.num_threads < 0)
      fail("num_threads must be >= 0 (0 = all cores), got {}", options.num_threads);
    return std::make_unique<cpu::CpuBackend>(options.num_threads);
  }
  if (options.device == "cuda") {
#if defined(NANOVLLM_WITH_CUDA)
    return std::make_unique<cuda::CudaBackend>(options.device_index);
#else
    fail("no CUDA device: nanovllm was built without CUDA (configure with -DNANOVLLM_CUDA=ON "
         "where nvcc is installed)");
#endif
  }
  fail("unknown device '{}' (expected 'cpu' or 'cuda')", options.device);
}

}  // namespace nanovllm
