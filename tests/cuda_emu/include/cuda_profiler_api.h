#pragma once
// Stands in for the CUDA toolkit header of this name in the emulated build: no profiler attaches
// to the emulator, so the window calls do nothing.
#include "nanovllm_cuda_emu.h"

namespace nanovllm::cuda_emu {
inline cudaError_t cudaProfilerStart() { return cudaSuccess; }
inline cudaError_t cudaProfilerStop() { return cudaSuccess; }
}  // namespace nanovllm::cuda_emu
