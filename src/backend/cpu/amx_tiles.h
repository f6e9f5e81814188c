#pragma once
// AMX tile helpers shared by the AMX kernels (gemm_amx.cpp, qgemm_amx.cpp): the tile
// instructions as templates over the tile register (an immediate in every instruction), and the
// per-thread tile configuration. Only reached after cpu_has_amx_bf16() / cpu_has_amx_int8()
// (isa.h), which also asked Linux for the tile state.
#include <cstdint>

#include "util/check.h"

namespace nanovllm::cpu::detail::amx {

// "memory": the loads read (and the stores write) memory the compiler does not see as operands.
template <int T>
inline void load(const void* base, int64_t stride) {
  asm volatile("{tileloadd\t(%0,%1,1), %%tmm%c2|tileloadd\t%%tmm%c2, [%0+%1*1]}" ::"r"(base),
               "r"(stride), "i"(T)
               : "memory");
}
template <int T>
inline void store(void* base, int64_t stride) {
  asm volatile("{tilestored\t%%tmm%c2, (%0,%1,1)|tilestored\t[%0+%1*1], %%tmm%c2}" ::"r"(base),
               "r"(stride), "i"(T)
               : "memory");
}
template <int T>
inline void zero() {
  asm volatile("tilezero\t%%tmm%c0" ::"i"(T));
}
// C (f32) += A @ B on bf16 pairs.
template <int C, int A, int B>
inline void dp_bf16() {
  asm volatile(
      "{tdpbf16ps\t%%tmm%c2, %%tmm%c1, %%tmm%c0|tdpbf16ps\t%%tmm%c0, %%tmm%c1, %%tmm%c2}" ::"i"(C),
      "i"(A), "i"(B));
}
// C (int32) += A @ B on int8 quads: A signed (ss) or unsigned (us), B signed.
template <int C, int A, int B>
inline void dp_ss() {
  asm volatile(
      "{tdpbssd\t%%tmm%c2, %%tmm%c1, %%tmm%c0|tdpbssd\t%%tmm%c0, %%tmm%c1, %%tmm%c2}" ::"i"(C),
      "i"(A), "i"(B));
}
template <int C, int A, int B>
inline void dp_us() {
  asm volatile(
      "{tdpbusd\t%%tmm%c2, %%tmm%c1, %%tmm%c0|tdpbusd\t%%tmm%c0, %%tmm%c1, %%tmm%c2}" ::"i"(C),
      "i"(A), "i"(B));
}

// A palette-1 configuration: tile t is rows[t] x colsb[t] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Makes `config` (a static object) the calling thread's tile configuration, loading it only when
// the thread's last one was another (loading clears every tile). `available` (cpu_has_amx_bf16
// or cpu_has_amx_int8) is checked then, not on every call.
inline void use(const TileConfig& config, bool (*available)()) {
  thread_local const TileConfig* loaded = nullptr;
  if (loaded == &config) return;
  NV_CHECK(available(), "AMX tiles are not available to this process");
  asm volatile("ldtilecfg\t%0" ::"m"(config));
  loaded = &config;
}

}  // namespace nanovllm::cpu::detail::amx
