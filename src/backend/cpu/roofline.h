#pragma once
// Napkin-math ceilings of this machine, measured in well under a second each: the memory read
// bandwidth a decode step streams weights at, and the bf16 multiply-add peak a prefill GEMM
// computes at. Benchmarks print their results as a fraction of these.
#include "backend/cpu/gemm.h"
#include "backend/cpu/thread_pool.h"

namespace nanovllm::cpu {

// GB/s (1e9 bytes) of reading a 256 MiB buffer (>> LLC) on every thread of the pool; best of
// a few passes.
double measure_read_bandwidth_gbs(ThreadPool& pool);

// GFLOP/s of a register-only multiply-add loop on every thread of the pool, counting 2 FLOPs
// per multiply-add: vdpbf16ps (64 per zmm instruction) for AVX512_BF16, vfmadd231ps on ymm
// (16 per instruction) for AVX2.
double measure_bf16_peak_gflops(ThreadPool& pool, GemmIsa isa);

}  // namespace nanovllm::cpu
