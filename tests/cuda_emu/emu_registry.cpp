// The backend registry of the emulated test executables (label cuda_emu): "cuda" is the CUDA
// backend compiled against the emulator (its namespace is nanovllm::cuda_emu in this build, see
// include/nanovllm_cuda_emu.h). This definition of make_backend is linked ahead of
// libnanovllm.a, whose registry.cpp (the real one, which defines nothing else) is then never
// pulled in; "cpu" and unknown devices behave as they do there.
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "util/check.h"

namespace nanovllm {

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.device == "cpu") {
    if (options.num_threads < 0)
      fail("num_threads must be >= 0 (0 = all cores), got {}", options.num_threads);
    return std::make_unique<cpu::CpuBackend>(options.num_threads);
  }
  if (options.device == "cuda") return std::make_unique<cuda::CudaBackend>(options.device_index);
  fail("unknown device '{}' (expected 'cpu' or 'cuda')", options.device);
}

}  // namespace nanovllm
