// NANOVLLM_CPU_ISA and CPU feature detection (isa.h).
#include "backend/cpu/isa.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "util/check.h"

namespace nanovllm::cpu {

CpuIsa parse_cpu_isa(std::string_view s) {
  if (s.empty() || s == "auto") return CpuIsa::Auto;
  if (s == "avx2") return CpuIsa::AVX2;
  if (s == "avxvnni") return CpuIsa::AVXVNNI;
  if (s == "avx512") return CpuIsa::AVX512;
  if (s == "amx") return CpuIsa::AMX;
  fail("NANOVLLM_CPU_ISA='{}': expected auto, avx2, avxvnni, avx512 or amx", std::string(s));
}

CpuIsa cpu_isa_from_env() {
  const char* env = std::getenv("NANOVLLM_CPU_ISA");
  return env ? parse_cpu_isa(env) : CpuIsa::Auto;
}

bool prefill_bf16_from_env() {
  const char* env = std::getenv("NANOVLLM_PREFILL_ATTENTION");
  const std::string_view v = env ? env : "";
  if (v.empty() || v == "f32") return false;
  if (v == "bf16") return true;
  fail("NANOVLLM_PREFILL_ATTENTION must be f32 or bf16, got '{}'", v);
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Auto:
      return "auto";
    case CpuIsa::AVX2:
      return "avx2";
    case CpuIsa::AVXVNNI:
      return "avxvnni";
    case CpuIsa::AVX512:
      return "avx512";
    case CpuIsa::AMX:
      return "amx";
  }
  return "?";
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

bool cpu_has_avx512_bf16() { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }

bool cpu_is_amd() {
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
}

bool cpu_is_zen1() {
  __builtin_cpu_init();
  return __builtin_cpu_is("znver1");
}

int64_t cpu_l2_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? int64_t(l2) : int64_t(1) << 20;
  }();
  return bytes;
}

namespace {

// Linux (5.16+) hands out the 8 KiB tile state only on request; without it the first tile
// instruction faults. Asked once per process.
bool amx_tiles_granted() {
  static const bool granted = [] {
    if (!__builtin_cpu_supports("amx-tile")) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

}  // namespace

bool cpu_has_amx_bf16() {
  return cpu_has_avx512_bf16() && __builtin_cpu_supports("amx-bf16") && amx_tiles_granted();
}

bool cpu_has_amx_int8() {
  return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("amx-int8") && amx_tiles_granted();
}

bool bf16_prefill_available(CpuIsa want) { return avx512_allowed(want) && cpu_has_avx512_bf16(); }

}  // namespace nanovllm::cpu
