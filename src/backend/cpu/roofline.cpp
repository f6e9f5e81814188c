#include "backend/cpu/roofline.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>

namespace nanovllm::cpu {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Sums 64-bit lanes of [p, p + bytes) with 8 independent accumulators (loads dominate).
__attribute__((target("avx2"))) uint64_t read_sum(const uint8_t* p, size_t bytes) {
  __m256i acc[8];
  for (auto& a : acc) a = _mm256_setzero_si256();
  for (size_t off = 0; off + 256 <= bytes; off += 256)
    for (int j = 0; j < 8; ++j)
      acc[j] = _mm256_add_epi64(
          acc[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + off + 32 * j)));
  for (int j = 1; j < 8; ++j) acc[0] = _mm256_add_epi64(acc[0], acc[j]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// Independent accumulators: more than latency x throughput, so the loop is throughput-bound.
constexpr int kAcc = 24;

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_loop(int64_t iters) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(float(j));
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1.0, 1.0)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x0d800d80);  // (2^-100, 2^-100): normal, tiny
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  for (int j = 1; j < kAcc; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  return lanes[0];
}

constexpr int kYmm = 12;

__attribute__((target("avx2,fma"))) float fma_loop(int64_t iters) {
  __m256 acc[kYmm];
  for (int j = 0; j < kYmm; ++j) acc[j] = _mm256_set1_ps(float(j));
  const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-30f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kYmm; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < kYmm; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  return lanes[0];
}

}  // namespace

double measure_read_bandwidth_gbs(ThreadPool& pool) {
  constexpr size_t kBytes = size_t(256) << 20;
  struct Free {
    void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<void, Free> buf(::operator new(kBytes, std::align_val_t(64)));
  uint8_t* base = static_cast<uint8_t*>(buf.get());
  const int threads = pool.size();
  const size_t per = (kBytes / size_t(threads)) & ~size_t(255);
  // First touch on every thread (pages fault in here, not timed).
  pool.run_on_all([&](int t) { std::memset(base + per * size_t(t), t + 1, per); });
  // Threads claim 2 MiB chunks from a counter (as the GEMM does), so one thread that starts
  // late does not stretch the pass.
  constexpr size_t kChunk = size_t(2) << 20;
  const size_t num_chunks = (per * size_t(threads)) / kChunk;
  double best = 0.0;
  std::atomic<uint64_t> sink{0};
  for (int rep = 0; rep < 10; ++rep) {  // ~5 ms a pass; the page faults above dominate
    std::atomic<size_t> next{0};
    auto t0 = Clock::now();
    pool.run_on_all([&](int) {
      uint64_t sum = 0;
      for (size_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < num_chunks;)
        sum += read_sum(base + c * kChunk, kChunk);
      sink.fetch_add(sum, std::memory_order_relaxed);
    });
    best = std::max(best, double(num_chunks * kChunk) / seconds_since(t0) / 1e9);
  }
  return best;
}

double measure_bf16_peak_gflops(ThreadPool& pool, GemmIsa isa) {
  const bool bf16 = isa == GemmIsa::AVX512_BF16;
  const double flops_per_iter = bf16 ? kAcc * 64.0 : kYmm * 16.0;
  const int64_t iters = 1 << 17;  // ~10 ms a pass at a few GHz
  volatile float sink = 0.0f;
  double best = 0.0;
  for (int rep = 0; rep < 8; ++rep) {  // best of 8: the first passes also ramp the clocks up
    auto t0 = Clock::now();
    pool.run_on_all([&](int) { sink = sink + (bf16 ? dpbf16_loop(iters) : fma_loop(iters)); });
    best = std::max(best, flops_per_iter * double(iters) * pool.size() / seconds_since(t0) / 1e9);
  }
  return best;
}

}  // namespace nanovllm::cpu
