// The backend registry: the one place that knows which backends exist.
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

namespace nanovllm {

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.device == "cpu") {
    if (options.num_threads < 0)
      fail("num_threads must be >= 0 (0 = all cores), got {}", options.num_threads);
    return std::make_unique<cpu::CpuBackend>(options.num_threads);
  }
  if (options.device == "cuda") {
#if defined(NANOVLLM_WITH_CUDA)
#error "the CUDA backend is not wired into the registry yet"
#else
    fail("device 'cuda' is not available: nanovllm was built without CUDA");
#endif
  }
  fail("unknown device '{}' (expected 'cpu' or 'cuda')", options.device);
}

}  // namespace nanovllm
