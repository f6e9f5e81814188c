#pragma once
// Stands in for the CUDA toolkit header of this name in the emulated build (nanovllm_cuda_emu.h).
#include "nanovllm_cuda_emu.h"
