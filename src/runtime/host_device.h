#pragma once
// NV_HOST_DEVICE marks small inline functions (a kernel's per-element math, slot arithmetic, the
// sampler's race) that both the CPU code and CUDA kernels call, so the CPU tests check the exact
// math the GPU runs.
#if defined(__CUDACC__)
#define NV_HOST_DEVICE __host__ __device__
#else
#define NV_HOST_DEVICE
#endif
