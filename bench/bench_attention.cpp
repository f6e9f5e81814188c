// Paged attention benchmark on the Qwen3-0.6B shapes (16 q heads, 8 kv heads, head_dim 128, bf16
// KV cache [num_blocks, 256, 8, 128]), ms per layer with napkin math:
//   prefill: one prompt of 512, 4096 and 16384 tokens; causal attention FLOPs =
//            4 * D * Hq * T(T+1)/2 (QK^T and P.V, 2 FLOPs per multiply-add), against the measured
//            f32 FMA peak: the long prompts must keep the 512-token rate (no cliff).
//   decode:  1 and 16 sequences at context 1024, and 1 at 16384 (split into partitions over the
//            threads), over a bf16 and an fp8 (E4M3) cache; bytes = the K and V rows read per
//            step (ctx * Hkv * D * 2 * element bytes), against the measured read bandwidth. The
//            caches of several layers are cycled (>= 512 MiB in all) so the KV rows come from
//            memory, as in a real step over 28 layers. The 1 x 1,024 case runs once more over one
//            cache (4 MiB bf16, 2 fp8: in the L2 / L3 where they fit), against the f32 FMA
//            peak: a kernel no faster there than from memory is held by its arithmetic.
//
//   bench_attention [--threads N] [--decode | --prefill T,...] [--shapes SEQSxCTX,...]
//     --decode: the decode cases only; --prefill: these prompt lengths only (e.g. 4096);
//     --shapes: these decode batches instead of 1x1024, 16x1024, 1x16384 (e.g. 16x192: the
//     16-sequence `nanovllm bench` workload's mean context, or 1x100,1x300 for the one-sequence
//     split); NANOVLLM_CPU_ISA=avx2 forces the AVX2 kernels.
//     The FMA peak is that of the decode kernels' vectors (zmm on the AVX-512 path).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/host_memory.h"
#include "backend/cpu/roofline.h"
#include "runtime/forward_batch.h"
#include "runtime/fp8.h"
#include "runtime/tensor.h"

using namespace nanovllm;
using namespace nanovllm::cpu;

namespace {

constexpr int64_t kHq = 16, kHkv = 8, kD = 128, kBlock = 256;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One layer's paged cache for `seqs` sequences of `ctx` tokens, blocks handed out in order:
// bf16, or fp8 (E4M3 codes, scales 1), values uniform in [-1, 1). Allocated as the engine
// allocates its KV cache (host_alloc: 2 MiB-aligned, transparent huge pages asked for).
struct Cache {
  void* k = nullptr;
  void* v = nullptr;
  size_t bytes = 0;
  int64_t num_blocks;
  bool fp8;
  Cache(int64_t blocks, std::mt19937& rng, bool fp8_ = false) : num_blocks(blocks), fp8(fp8_) {
    const size_t n = size_t(blocks * kBlock * kHkv * kD);
    bytes = n * (fp8 ? 1 : 2);
    k = host_alloc(bytes);
    v = host_alloc(bytes);
    // A 64-bit LCG seeded from rng (mt19937 per element took most of the bench's minute).
    uint64_t x = (uint64_t(rng()) << 32) | rng();
    auto next = [&x] {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return float(int32_t(x >> 32)) * 0x1p-31f;  // [-1, 1)
    };
    for (size_t i = 0; i < n; ++i) {
      const float a = next(), b = next();
      if (fp8) {
        static_cast<uint8_t*>(k)[i] = float_to_fp8_e4m3(a);
        static_cast<uint8_t*>(v)[i] = float_to_fp8_e4m3(b);
      } else {
        static_cast<uint16_t*>(k)[i] = f32_to_bf16(a);
        static_cast<uint16_t*>(v)[i] = f32_to_bf16(b);
      }
    }
  }
  Cache(Cache&& o) noexcept : k(o.k), v(o.v), bytes(o.bytes), num_blocks(o.num_blocks), fp8(o.fp8) {
    o.k = o.v = nullptr;
  }
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  ~Cache() {
    host_free(k, bytes);
    host_free(v, bytes);
  }
  LayerKVCache view() {
    const std::initializer_list<int64_t> shape = {num_blocks, kBlock, kHkv, kD};
    const DType t = fp8 ? DType::F8E4M3 : DType::BF16;
    return {Tensor::contiguous(k, t, shape), Tensor::contiguous(v, t, shape)};
  }
};

HostBatch make_batch(int64_t seqs, int64_t seqlen_q, int64_t ctx, bool prefill) {
  HostBatch hb;
  hb.is_prefill = prefill;
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  hb.max_num_blocks = int(blocks_per_seq);
  hb.cu_seqlens_q = {0};
  hb.cu_seqlens_k = {0};
  for (int64_t b = 0; b < seqs; ++b) {
    for (int64_t i = 0; i < blocks_per_seq; ++i)
      hb.block_tables.push_back(int32_t(b * blocks_per_seq + i));
    hb.cu_seqlens_q.push_back(hb.cu_seqlens_q.back() + int32_t(seqlen_q));
    hb.cu_seqlens_k.push_back(hb.cu_seqlens_k.back() + int32_t(ctx));
    hb.context_lens.push_back(int32_t(ctx));
  }
  hb.input_ids.assign(size_t(seqs * seqlen_q), 1);
  hb.max_seqlen_q = int(seqlen_q);
  hb.max_seqlen_k = int(ctx);
  return hb;
}

// Milliseconds per call: the minimum and the median of repeated calls. On a shared machine the
// minimum is the better estimate of the uncontended time.
// The process CPU time of the calls (all threads) is immune to being descheduled: with N threads
// cpu_ms / N is the wall time a call would take on N otherwise idle cores. It is taken over the
// whole run of calls, not per call: Linux brings another running thread's CPU time up to date
// only at a scheduler tick or event, so the per-call figure of a short call (a few ms)
// missed the workers' share (on 2 threads, a call of 0.14 or 1.4 ms that kept both busy read
// as one thread's time in most calls, i.e. half the wall time per thread; from 5.7 ms it read
// right). Over the run (0.5 s or more, or one call of seconds) the lag is at most a tick a
// thread.
struct Timing {
  double min_ms, median_ms, cpu_ms;  // cpu_ms: the process CPU time of the run per call
};

double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

template <class F>
Timing time_ms(F&& f, int min_reps, double min_s) {
  f();  // warm-up
  std::vector<double> times;
  double total = 0.0;
  const double c0 = cpu_s();
  for (int rep = 0; rep < 1000 && (total < min_s || rep < min_reps); ++rep) {
    const double t0 = now_s();
    f();
    const double t = now_s() - t0;
    times.push_back(t);
    total += t;
  }
  const double cpu = cpu_s() - c0;
  std::sort(times.begin(), times.end());
  return {times.front() * 1e3, times[times.size() / 2] * 1e3, cpu / double(times.size()) * 1e3};
}

// "SEQSxCTX,SEQSxCTX,..." into shapes (each at least 1x1); false on anything else.
bool parse_shapes(const std::string& text, std::vector<std::pair<int64_t, int64_t>>* shapes) {
  std::vector<std::pair<int64_t, int64_t>> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    long long seqs = 0, ctx = 0;
    char tail = 0;
    if (std::sscanf(text.substr(pos, end - pos).c_str(), "%lldx%lld%c", &seqs, &ctx, &tail) != 2 ||
        seqs < 1 || ctx < 1 || seqs > 4096 || ctx > (1 << 20))
      return false;
    out.emplace_back(seqs, ctx);
    pos = end + 1;
  }
  *shapes = std::move(out);
  return true;
}

// "T,T,..." into lens (each 1 .. 65,536); false on anything else.
bool parse_lens(const std::string& text, std::vector<int64_t>* lens) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    long long t = 0;
    char tail = 0;
    if (std::sscanf(text.substr(pos, end - pos).c_str(), "%lld%c", &t, &tail) != 1 || t < 1 ||
        t > (1 << 16))
      return false;
    out.push_back(t);
    pos = end + 1;
  }
  *lens = std::move(out);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  bool decode_only = false, prefill_only = false;
  std::vector<int64_t> prefill_lens = {512, 4096, 16384};
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1024}, {16, 1024}, {1, 16384}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--decode") {
      decode_only = true;
    } else if (a == "--shapes" && i + 1 < argc && parse_shapes(argv[i + 1], &shapes)) {
      ++i;
    } else if (a == "--prefill" && i + 1 < argc && parse_lens(argv[i + 1], &prefill_lens)) {
      prefill_only = true;
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: bench_attention [--threads N] [--decode | --prefill T,...] "
                   "[--shapes SEQSxCTX,...]\n");
      return 2;
    }
  }
  CpuBackend be(threads);
  const double bw = measure_read_bandwidth_gbs(be.pool());
  // The f32 FMA peak of the decode kernels' vectors: zmm on the AVX-512 path, ymm on AVX2.
  const double peak =
      measure_bf16_peak_gflops(be.pool(), be.decode_avx512() ? GemmIsa::AVX512_FMA : GemmIsa::AVX2);
  const char* isa_env = std::getenv("NANOVLLM_CPU_ISA");
  std::printf("%s, NANOVLLM_CPU_ISA: %s\n", be.describe().c_str(), isa_env ? isa_env : "(none)");
  std::printf("measured: read bandwidth %.1f GB/s, f32 FMA peak %.0f GFLOP/s\n\n", bw, peak);
  std::mt19937 rng(0);
  const float scale = 1.0f / std::sqrt(float(kD));
  const int64_t qkv_width = (kHq + 2 * kHkv) * kD;  // q is a strided view of the fused qkv rows

  // ---- prefill: one prompt of 512, 4096, 16384 tokens ----
  for (int64_t t : prefill_lens) {
    if (decode_only) break;
    Cache cache((t + kBlock - 1) / kBlock, rng);
    HostBatch hb = make_batch(1, t, t, true);
    ForwardBatch fb;
    fb.host = &hb;
    fb.is_prefill = true;
    fb.num_seqs = 1;
    fb.num_tokens = int(t);
    std::vector<float> qkv(size_t(t * qkv_width)), out(size_t(t * kHq * kD));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (float& x : qkv) x = dist(rng);
    Tensor q = Tensor::contiguous(qkv.data(), DType::F32, {t, qkv_width})
                   .slice_last(0, kHq * kD)
                   .unflatten_last(kHq);
    Tensor o = Tensor::contiguous(out.data(), DType::F32, {t, kHq, kD});
    LayerKVCache c = cache.view();
    const Timing tm = time_ms([&] { be.attention_prefill(o, q, c, fb, scale); }, t <= 512 ? 10 : 1,
                              t <= 4096 ? 1.0 : 0.0);
    const double ms = std::max(tm.cpu_ms / threads, 1e-6);
    const double flops = 4.0 * double(kD) * double(kHq) * double(t) * double(t + 1) / 2.0;
    std::printf(
        "prefill  T=%-5lld:      %8.3f ms/layer (wall min %.3f)  %6.1f GFLOP/s (%.0f%% of f32 "
        "peak; %.2f GFLOP)  x28 layers = %.1f ms\n",
        (long long)t, ms, tm.min_ms, flops / ms / 1e6, 100.0 * flops / ms / 1e6 / peak, flops / 1e9,
        28 * ms);
  }

  // ---- decode: the shapes (by default 1 and 16 sequences at context 1024, 1 at 16384); bf16
  // then fp8 ----
  for (bool fp8 : {false, true})
    for (auto [seqs, ctx] : shapes) {
      if (prefill_only) break;
      const int64_t blocks = seqs * ((ctx + kBlock - 1) / kBlock);
      const int64_t elem = fp8 ? 1 : 2;
      const double layer_bytes = double(blocks * kBlock * kHkv * kD * elem * 2);
      const int copies = int(std::max(1.0, std::ceil(512.0 * (1 << 20) / layer_bytes)));
      std::vector<Cache> caches;
      for (int i = 0; i < copies; ++i) caches.emplace_back(blocks, rng, fp8);
      HostBatch hb = make_batch(seqs, 1, ctx, false);
      hb.cu_seqlens_q.clear();
      ForwardBatch fb;
      fb.host = &hb;
      fb.num_seqs = int(seqs);
      fb.num_tokens = int(seqs);
      std::vector<float> qkv(size_t(seqs * qkv_width)), out(size_t(seqs * kHq * kD));
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      for (float& x : qkv) x = dist(rng);
      Tensor q = Tensor::contiguous(qkv.data(), DType::F32, {seqs, qkv_width})
                     .slice_last(0, kHq * kD)
                     .unflatten_last(kHq);
      Tensor o = Tensor::contiguous(out.data(), DType::F32, {seqs, kHq, kD});
      std::vector<LayerKVCache> views;
      for (auto& c : caches) views.push_back(c.view());
      size_t next = 0;
      const Timing tm = time_ms(
          [&] {
            be.attention_decode(o, q, views[next], fb, scale);
            next = (next + 1) % views.size();
          },
          20, 1.0);
      const double ms = std::max(tm.cpu_ms / threads, 1e-6);
      const double bytes = double(seqs * ctx * kHkv * kD * elem * 2);
      std::printf(
          "decode %s B=%2lld ctx=%-5lld: %8.3f ms/layer (wall min %.3f)  %6.1f GB/s (%.0f%% of "
          "read bw; %.1f MiB KV/step/layer)  x28 layers = %.2f ms\n",
          fp8 ? "fp8 " : "bf16", (long long)seqs, (long long)ctx, ms, tm.min_ms, bytes / ms / 1e6,
          100.0 * bytes / ms / 1e6 / bw, bytes / (1 << 20), 28 * ms);
      if (seqs == 1 && ctx == 1024) {  // the same call over one cache: the KV stays in the caches
        const Timing hot =
            time_ms([&] { be.attention_decode(o, q, views[0], fb, scale); }, 20, 0.5);
        const double hms = std::max(hot.cpu_ms / threads, 1e-6);
        const double flops = 4.0 * double(kD) * double(kHq) * double(ctx);  // QK and P.V
        std::printf(
            "decode %s B= 1 ctx=1024  one cache: %8.3f ms/layer (wall min %.3f)  %6.1f GB/s, %.1f "
            "GFLOP/s (%.0f%% of the f32 FMA peak): the same %.1f MiB, not cycled\n",
            fp8 ? "fp8 " : "bf16", hms, hot.min_ms, bytes / hms / 1e6, flops / hms / 1e6,
            100.0 * flops / hms / 1e6 / peak, bytes / (1 << 20));
      }
    }
  std::printf(
      "\nms/layer: process CPU time per call (over the whole run of calls) / threads (robust on\n"
      "a shared machine; equals the wall time on idle cores when the threads are kept busy);\n"
      "wall min: the fastest wall-clock call. Decode cycles the KV reads through >= 512 MiB of\n"
      "layer caches.\n");
  return 0;
}
