#pragma once
// Which x86 kernels the CPU backend runs. By default the best the CPU has (AVX-512 GEMMs, the
// bf16 one's instruction picked by measurement (gemm.h), and AVX-512 decode attention where
// available, AVX2+FMA otherwise); the environment variable
// NANOVLLM_CPU_ISA=avx2 forces the AVX2 kernels everywhere (to test or compare them on an
// AVX-512 machine), NANOVLLM_CPU_ISA=avxvnni the kernels of an AVX2 + AVX-VNNI CPU (an Intel
// client core: the AVX2 kernels, with the AVX-VNNI tiles for quantized weights) and
// NANOVLLM_CPU_ISA=avx512 demands the AVX-512 ones (an Error on a CPU without them; so is
// avxvnni on a CPU without AVX-VNNI), but not AMX, and NANOVLLM_CPU_ISA=amx demands the AMX
// BF16 GEMM (an Error where the CPU or the OS does not offer it). "auto" or unset: detect (AMX
// where available). Any other value: an Error naming the accepted ones.
#include <cstdint>
#include <optional>
#include <string_view>

namespace nanovllm::cpu {

enum class CpuIsa { Auto, AVX2, AVXVNNI, AVX512, AMX };

// Whether `want` lets the AVX-512 kernels run (auto, avx512 and amx; not avx2, avxvnni).
inline bool avx512_allowed(CpuIsa want) {
  return want == CpuIsa::Auto || want == CpuIsa::AVX512 || want == CpuIsa::AMX;
}

// "auto", "avx2", "avxvnni", "avx512", "amx" (or "" = auto); anything else throws Error.
CpuIsa parse_cpu_isa(std::string_view s);
// NANOVLLM_CPU_ISA, parsed (Auto when unset).
CpuIsa cpu_isa_from_env();
const char* cpu_isa_name(CpuIsa isa);

// NANOVLLM_PREFILL_ATTENTION: "f32" (or unset) keeps attention_prefill's matmuls in f32 (logits
// within 1e-3 of the bf16-storage reference); "bf16" runs them on AVX-512 BF16 with q and P
// rounded to bf16 (1.3-1.7x faster attention on long prompts; logits about 4e-3 off on the
// tiny models). Anything else throws Error naming the accepted values.
bool prefill_bf16_from_env();

// What the CPU can run: AVX-512 F/BW/VL/DQ (the decode-attention kernels and the FMA GEMM) and,
// on top, AVX-512 BF16 (the vdpbf16ps GEMM, the bf16 prefill attention).
bool cpu_has_avx512();
bool cpu_has_avx512_bf16();
// An AMD core (the kernels' software prefetch is tuned per vendor where it measured apart:
// qgemm.h).
bool cpu_is_amd();
// A first-generation Zen or Zen+ (GCC's "znver1": AMD family 23 before Zen 2; AVX2 and FMA on
// 128-bit units), whose quantized AVX2 tiles prefetch differently (qgemm.h, kRowNtaAheadBytes).
bool cpu_is_zen1();
// The L2 cache of one core in bytes, as the OS reports it (sysconf); 1 MiB where it reports
// nothing. Read once per process.
int64_t cpu_l2_bytes();
// AMX BF16 tiles usable by this process: the CPU has AMX-TILE and AMX-BF16 (and AVX-512 BF16,
// which the kernels' x packing uses) and Linux granted the tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM, asked once per process on the first call).
bool cpu_has_amx_bf16();
// AMX INT8 tiles usable by this process (with AVX-512 VNNI, whose tiles serve what the AMX ones
// do not): the same conditions, for AMX-INT8.
bool cpu_has_amx_int8();
// Whether the bf16 prefill attention may run under `want`: AVX-512 BF16, not turned off by
// NANOVLLM_CPU_ISA=avx2 or avxvnni (whichever AVX-512 GEMM the CPU takes).
bool bf16_prefill_available(CpuIsa want);

}  // namespace nanovllm::cpu
