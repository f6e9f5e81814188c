#pragma once
// Napkin-math ceilings of this machine, measured in about a second: the memory read bandwidth a
// decode step streams weights at, and the multiply-add peaks the GEMM kernels compute at (the
// f32 FMA peak for the AVX2 kernels, the vdpbf16ps peak for the AVX-512 BF16 ones). Each is the
// best of several short runs, with the spread of those runs reported, so that a run disturbed
// by another process shows as a spread rather than as a lower ceiling. Benchmarks print their
// results as a fraction of the ceiling of the instructions their kernels run.
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/thread_pool.h"

namespace nanovllm::cpu {

// A ceiling: the best of `runs` short runs (what the benchmarks divide by), their median and
// worst; a median or worst far below the best means the machine was busy while measuring.
struct Ceiling {
  double best = 0, median = 0, worst = 0;
  int runs = 0;
  std::string how;  // what was measured, e.g. "4 streams a thread"
  int streams = 0;  // read bandwidth: the sequential streams a thread of the best pattern
  bool nta = false;  // read bandwidth: the best pattern prefetches with prefetchnta
};

// Bytes a benchmark reads where they lie, e.g. one weight's packed storage.
struct ByteRange {
  const void* data = nullptr;  // 32-byte aligned
  size_t bytes = 0;
};

// GB/s (1e9 bytes) of reading a 256 MiB buffer (>> LLC) on every thread of the pool, with 1, 2,
// 4 and 8 concurrent sequential streams per thread (the hardware prefetchers of some CPUs
// deliver more with several streams, as a GEMM reading several weight blocks has), and 1, 2
// and 4 streams each prefetched with prefetchnta (gemm_internal.h, kStreamOnceAheadBytes): the
// best pattern's runs.
Ceiling measure_read_bandwidth(ThreadPool& pool);

// GB/s of reading `ranges` once on every thread of the pool with `streams` (1, 2, 4 or 8)
// sequential streams a thread (prefetched with prefetchnta where `nta`: a Ceiling's pattern),
// threads claiming 2 MiB pieces as above: the best of 3 to 7 passes (more while a pass is
// short). The ceiling of a decode step that reads these bytes where they lie. Memory need not be
// uniform: on a 2-core EPYC VM of this project some 256 MiB regions of one buffer read at 14 GB/s
// and others at 20, the same regions on every pass (most likely the host's backing of the VM's
// memory), so a 14 GB model's weights streamed slower than the probe's fresh 256 MiB buffer. Each
// range's last bytes past a multiple of 512 are not read (nor counted). Error when no range holds
// 512 bytes.
Ceiling measure_read_bandwidth_of(ThreadPool& pool, const std::vector<ByteRange>& ranges,
                                  int streams, bool nta = false);

// GFLOP/s of a register-only multiply-add loop on every thread of the pool (2 FLOPs per
// multiply-add): vfmadd231ps on ymm (16 FLOPs an instruction) for GemmIsa::AVX2, on zmm (32)
// for AVX512_FMA, vdpbf16ps on zmm (64) for AVX512_BF16.
Ceiling measure_gemm_peak(ThreadPool& pool, GemmIsa isa);
// The name of that instruction ceiling, e.g. "f32 FMA (vfmadd231ps ymm)".
const char* gemm_peak_name(GemmIsa isa);
// GFLOP/s of the kernel set's decode tile on every thread of the pool: the wide register tile
// of `rows` rows (clamped to the set's tallest; what gemm_wide runs for a batch of that many
// sequences) over bf16 weights that stay in L1 (two 16-column groups of k = 256 a thread), with
// its loads, widening and stores. A register-only loop (measure_gemm_peak) does not see what
// slows a loop that loads beside every multiply-add: on a 2-core Intel VM (family 6 model 207,
// stop 62) this tile ran at 84-87% of that peak on one core in some minutes and at 57-65% in
// others while the peak stayed put. runs == 0 for AMX_BF16 (its decode rows run other tiles).
Ceiling measure_gemm_tile(ThreadPool& pool, GemmIsa isa, int rows = 16);
// The same for the quantized GEMM's integer instructions, in G ops/s (2 per multiply-add), so
// that its figures compare with GFLOP/s: for int8 weights vpmaddwd on ymm (16 multiply-adds)
// with QGemmIsa::AVX2, vpdpwssd on ymm (16) with AVX_VNNI and on zmm (32) with AVX512_VNNI; for
// int4 vpmaddubsw on ymm (32), vpdpbusd on ymm (32) and zmm (64); with AMX_INT8, int8 weights
// on the AMX tiles' instruction pair (qgemm_amx.cpp), int4 on the AVX-512 VNNI tiles.
Ceiling measure_qgemm_peak(ThreadPool& pool, QGemmIsa isa, QuantFormat format);
// e.g. "int8 dot (vpdpbusd zmm)".
const char* qgemm_peak_name(QGemmIsa isa, QuantFormat format);
// Whether this core runs bf16 GEMM multiply-adds faster through vdpbf16ps than through
// vfmadd231ps zmm on widened weights (a ~2 ms measurement on the calling thread; needs AVX-512
// BF16).
bool bf16_dot_outruns_fma512();

// The machine's load while measuring: /proc/loadavg's 1-minute average and runnable tasks, as
// "load 0.52, 1 running of 180" ("load unknown" when unreadable).
std::string machine_load();

// "best 36.8 (median 36.1, worst 30.2, 5 runs; 4 streams a thread)".
std::string describe(const Ceiling& c, const char* unit);

// The best figures alone (the older interface).
inline double measure_read_bandwidth_gbs(ThreadPool& pool) {
  return measure_read_bandwidth(pool).best;
}
inline double measure_bf16_peak_gflops(ThreadPool& pool, GemmIsa isa) {
  return measure_gemm_peak(pool, isa).best;
}

}  // namespace nanovllm::cpu
