#pragma once
// The CPU GEMM: out[M, N] = x[M, K] @ w[N, K]^T (+ bias), x f32, w bf16 pre-packed, fp32
// accumulation. Kernels, chosen once at runtime (NANOVLLM_CPU_ISA overrides, isa.h): on AVX-512
// BF16 CPUs vdpbf16ps or, where the core runs that slower than FMAs (Intel's Sapphire / Emerald
// Rapids), vfmadd231ps zmm on widened weights; the latter on other AVX-512 CPUs; AVX2+FMA
// otherwise. x is rounded to bf16 inside the kernel (as a bf16 GEMM does). The AVX-512 FMA and
// AVX2 kernels give the same bits. On CPUs with AMX (Intel Xeon since Sapphire Rapids), AMX BF16
// tiles (tdpbf16ps) for every M.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/isa.h"
#include "backend/cpu/thread_pool.h"

namespace nanovllm::cpu {

enum class GemmIsa { AMX_BF16, AVX512_BF16, AVX512_FMA, AVX2 };
// The kernels for `want` (Auto: the best the CPU has). Error when the CPU cannot run them.
GemmIsa select_gemm_isa(CpuIsa want);
GemmIsa detect_gemm_isa();  // select_gemm_isa(cpu_isa_from_env())
const char* gemm_isa_name(GemmIsa isa);

// Bytes of the packed layout of a [n, k] bf16 weight (padded as the kernels need).
size_t packed_weight_bytes(int64_t n, int64_t k);
// Packs w (bf16 bits, row-major [n, k]) into dst (packed_weight_bytes(n, k) bytes, 64-aligned).
void pack_weight(void* dst, const uint16_t* w, int64_t n, int64_t k);
// The same for the blocks [b0, b1) of packed_weight_blocks(n) (16 rows of w each): the blocks are
// independent, so threads may pack disjoint ranges.
int64_t packed_weight_blocks(int64_t n);
void pack_weight_blocks(void* dst, const uint16_t* w, int64_t n, int64_t k, int64_t b0, int64_t b1);
// Row `row` of the original [n, k] weight, as f32 (the embedding lookup of a tied table).
void unpack_weight_row(float* out, const void* packed, int64_t n, int64_t k, int64_t row);

// Grow-only 64-byte-aligned scratch for the packed x of gemm() calls, owned by the caller (the
// CPU backend keeps one): a step's GEMMs then allocate nothing (a fresh multi-MiB buffer per
// call costs page faults that showed as ~5% of a prefill).
class GemmScratch {
 public:
  void* reserve(size_t bytes);
  ~GemmScratch();
  GemmScratch() = default;
  GemmScratch(const GemmScratch&) = delete;
  GemmScratch& operator=(const GemmScratch&) = delete;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct GemmArgs {
  float* out;              // [m, n], row stride ldo (elements)
  int64_t ldo;
  const float* x;          // [m, k], row stride ldx
  int64_t ldx;
  const void* packed_w;    // pack_weight(w[n, k])
  const uint16_t* bias;    // bf16 [n] or nullptr
  int64_t m, n, k;
  GemmScratch* scratch = nullptr;  // where x is packed; nullptr: a buffer of the call's own
};
void gemm(const GemmArgs& args, ThreadPool& pool, GemmIsa isa);

}  // namespace nanovllm::cpu
