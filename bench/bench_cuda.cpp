// CUDA kernel figures on the Qwen3-0.6B shapes with napkin math (needs a GPU; elsewhere it
// prints why and exits 1). Each figure is the median of 20 timed runs after 3 warm-ups, each run
// as many calls back to back as fill about 2 ms (a single call would time its launch and sync).
//   copy:    a 1 GiB device-to-device copy: (read + write) bytes / s, the bandwidth yardstick
//   decode:  attention_decode, 16 q / 8 kv heads, D 128, 256-token blocks, batch 256 at context
//            512 and 1024, 32 and 1 at 1024, over a bf16 and an fp8 cache: bytes = K and V rows
//            read (B * ctx * 8 * 128 * element bytes * 2); and batch 256 at contexts of 128 to 2048
//   sample:  256 rows of 151,936 logits, greedy and at temperature 0.6: logit bytes / s
//   prefill: attention_prefill of one 1024-token prompt: 4 * D * Hq * T(T+1)/2 FLOPs
//   linear:  x[M, 1024] @ w[3072, 1024]^T for M = 1 (the CUDA-core GEMV), 2, 4, 8, 16 (the
//            tensor-core GEMV) and 64, 256, 4096 (cuBLASLt): weight bytes / s and FLOP/s
//   qlinear: bf16, int8 (per row) and int4 (group 64) weights of Qwen3-0.6B's [3072, 1024] and
//            Llama 3 8B's down_proj [4096, 14336] at M = 1, 16, 64, 512: the weight bytes as
//            stored (codes and scales) / s, against the copy's bandwidth, and FLOP/s
//   moe:     fused_moe at Qwen3-30B-A3B's layer shape (H 2048, 128 experts of I 768, 8 a token,
//            random routing) with bf16, int8 and int4 experts, T = 1 to 2048 tokens: the bytes of
//            the experts the step's tokens pick / s, against the copy's bandwidth, and FLOP/s
//   bench_cuda [SECTION...]   (copy, decode, prefill, sample, linear, qlinear, moe; default all;
//                              copy always runs first: it is the yardstick)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "runtime/forward_batch.h"
#include "runtime/moe_routing.h"
#include "runtime/quant.h"

using namespace nanovllm;

namespace {

// Seconds per call as a stream runs it: calls back to back (as in a captured step), as many per
// timed run as fill about 2 ms, so the launch and the synchronization are not counted per call.
double median_seconds(Backend& be, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  be.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  fn();
  be.synchronize();
  const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int reps = std::clamp(int(2e-3 / std::max(one, 1e-7)), 1, 200);
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) {
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) fn();
    be.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor alloc(Backend& be, std::vector<Buffer>& keep, DType dt,
             std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::contiguous(nullptr, dt, shape, be.device());
  keep.push_back(be.alloc(t.nbytes()));
  t.data = keep.back().data();
  be.fill_zero(t);
  return t;
}

template <typename T>
Tensor put(Backend& be, std::vector<Buffer>& keep, const std::vector<T>& v, DType dt) {
  Tensor t = alloc(be, keep, dt, {int64_t(v.size())});
  be.upload(t, v.data());
  return t;
}

// n x k bf16 bits, normal with std 0.02 (a trained layer's spread; quantization needs a range).
std::vector<uint16_t> random_bf16(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<uint16_t> bits(static_cast<size_t>(n * k));
  for (uint16_t& b : bits) b = f32_to_bf16(nd(gen));
  return bits;
}

// A device weight of the scheme from host bf16 bits [n, k].
LinearWeight make_weight(Backend& be, const std::vector<uint16_t>& bits, int64_t n, int64_t k,
                         QuantScheme s) {
  if (!s.enabled())
    return be.make_linear_weight(Tensor::contiguous(const_cast<uint16_t*>(bits.data()), DType::BF16,
                                                    {n, k}, DeviceKind::CPU));
  return be.make_quantized_linear_weight(quantize_rtn(bits.data(), n, k, s, "bench weight"));
}

const QuantScheme kSchemes[] = {{}, {QuantFormat::Int8, 0}, {QuantFormat::Int4, kDefaultInt4Group}};

std::string scheme_name(QuantScheme s) { return s.enabled() ? quantization_name(s) : "bf16"; }

// linear() over bf16 / int8 / int4 weights: the bytes as stored (with their scales) per second.
void bench_qlinear(Backend& be, double copy_gbs) {
  std::vector<Buffer> keep;
  const std::pair<int64_t, int64_t> shapes[] = {{3072, 1024}, {4096, 14336}};
  for (auto [n, k] : shapes) {
    const std::vector<uint16_t> bits = random_bf16(n, k, 5);
    for (QuantScheme s : kSchemes) {
      const LinearWeight w = make_weight(be, bits, n, k, s);
      const double bytes = double(n * k) * quantized_bytes_per_weight(s, k);
      for (int64_t m : {1, 16, 64, 512}) {
        Tensor x = alloc(be, keep, DType::BF16, {m, k}), y = alloc(be, keep, DType::BF16, {m, n});
        const double t = median_seconds(be, [&] { be.linear(y, x, w, nullptr); });
        std::printf(
            "qlinear %s M=%lld [%lld x %lld]: %.1f us -> %.0f GB/s of weights (%.0f%% of "
            "copy), %.1f TFLOP/s\n",
            scheme_name(s).c_str(), (long long)m, (long long)n, (long long)k, t * 1e6,
            bytes / t / 1e9, 100 * bytes / t / 1e9 / copy_gbs, 2.0 * double(m * n * k) / t / 1e12);
      }
    }
  }
}

// fused_moe at Qwen3-30B-A3B's layer shape: a step of T tokens reads the experts they pick.
void bench_moe(Backend& be, double copy_gbs) {
  const int64_t H = 2048, I = 768, E = 128, k = 8;
  const std::vector<uint16_t> gate_up = random_bf16(2 * I, H, 6), down = random_bf16(H, I, 7);
  std::mt19937 gen(8);
  std::normal_distribution<float> unit(0.0f, 1.0f);
  for (QuantScheme s : kSchemes) {
    std::vector<Buffer> keep;
    MoeWeights w;
    // Every expert its own device copy of the same values (the bytes, not the values, count).
    for (int64_t e = 0; e < E; ++e) {
      w.gate_up.push_back(make_weight(be, gate_up, 2 * I, H, s));
      w.down.push_back(make_weight(be, down, H, I, s));
    }
    const double expert_bytes = double(2 * I * H) * quantized_bytes_per_weight(s, H) +
                                double(H * I) * quantized_bytes_per_weight(s, I);
    for (int64_t T : {1, 4, 16, 32, 64, 128, 512, 2048}) {
      std::vector<float> logits(static_cast<size_t>(T * E));
      for (float& v : logits) v = unit(gen);
      std::set<int32_t> used;  // the experts this step reads
      for (int64_t t = 0; t < T; ++t) {
        int32_t ids[k];
        float wts[k];
        moe_route(&logits[size_t(t * E)], int(E), int(k), true, ids, wts);
        used.insert(ids, ids + k);
      }
      Tensor x = alloc(be, keep, DType::BF16, {T, H}), out = alloc(be, keep, DType::BF16, {T, H});
      Tensor router = alloc(be, keep, DType::F32, {T, E});
      be.upload(router, logits.data());
      const double t = median_seconds(be, [&] { be.fused_moe(out, x, router, w, int(k), true); });
      const double bytes = double(used.size()) * expert_bytes;
      std::printf(
          "moe %s T=%lld (%zu experts): %.1f us -> %.0f GB/s of experts (%.0f%% of copy), "
          "%.1f TFLOP/s\n",
          scheme_name(s).c_str(), (long long)T, used.size(), t * 1e6, bytes / t / 1e9,
          100 * bytes / t / 1e9 / copy_gbs, 2.0 * 3 * double(I * H * T * k) / t / 1e12);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> known = {"copy",   "decode",  "prefill", "sample",
                                          "linear", "qlinear", "moe"};
  std::set<std::string> sections;
  for (int i = 1; i < argc; ++i) {
    if (std::find(known.begin(), known.end(), argv[i]) == known.end()) {
      std::fprintf(stderr,
                   "bench_cuda: unknown section '%s' (copy, decode, prefill, sample, linear, "
                   "qlinear, moe)\n",
                   argv[i]);
      return 2;
    }
    sections.insert(argv[i]);
  }
  auto want = [&](const char* name) { return sections.empty() || sections.count(name) > 0; };
  BackendOptions o;
  o.device = "cuda";
  std::unique_ptr<Backend> be;
  try {
    be = make_backend(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda needs a GPU: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", be->describe().c_str());
  std::vector<Buffer> keep;

  const int64_t copy_bytes = int64_t(1) << 30;
  Tensor a = alloc(*be, keep, DType::BF16, {copy_bytes / 2}),
         b = alloc(*be, keep, DType::BF16, {copy_bytes / 2});
  const double tc = median_seconds(*be, [&] { be->copy(b, a); });
  const double copy_gbs = 2.0 * double(copy_bytes) / tc / 1e9;
  std::printf("copy 1 GiB: %.3f ms -> %.0f GB/s (read + write)\n", tc * 1e3, copy_gbs);

  // Decode attention over a cache with a random block permutation.
  // The 256-sequence shapes first: `ncu -k regex:decode_partition --launch-count 1` profiles the
  // bench workload's case (about 512 keys on average).
  const int64_t hq = 16, hkv = 8, d = 128, bs = 256;  // Qwen3-0.6B's heads, the engine's blocks
  if (want("decode")) {
    // ctx 0: contexts drawn from 128..2048 (the bench workload's spread late in its decode).
    const std::pair<int64_t, int64_t> shapes[] = {
        {256, 512}, {256, 1024}, {256, 0}, {32, 1024}, {1, 1024}};
    for (DType kv : {DType::BF16, DType::F8E4M3})
      for (auto [B, ctx] : shapes) {
        std::vector<int32_t> lens(static_cast<size_t>(B), int32_t(ctx));
        if (ctx == 0) {
          std::mt19937 gen(7);
          for (int32_t& l : lens) l = int32_t(std::uniform_int_distribution<int>(128, 2048)(gen));
        }
        const int64_t max_ctx = *std::max_element(lens.begin(), lens.end());
        const int64_t blocks_per_seq = (max_ctx + bs - 1) / bs, width = blocks_per_seq + 1,
                      nb = B * blocks_per_seq;
        LayerKVCache cache{alloc(*be, keep, kv, {nb, bs, hkv, d}),
                           alloc(*be, keep, kv, {nb, bs, hkv, d})};
        be->fill_zero(cache.k);  // finite values (fp8 code 0 and bf16 0 alike)
        be->fill_zero(cache.v);
        std::vector<int32_t> perm(static_cast<size_t>(nb));
        for (int64_t i = 0; i < nb; ++i) perm[size_t(i)] = int32_t(i);
        std::shuffle(perm.begin(), perm.end(), std::mt19937(1));
        std::vector<int32_t> tables(static_cast<size_t>(B * width), -1);
        for (int64_t s = 0; s < B; ++s)
          for (int64_t j = 0; j < blocks_per_seq; ++j)
            tables[size_t(s * width + j)] = perm[size_t(s * blocks_per_seq + j)];
        HostBatch h;
        ForwardBatch fb;
        fb.host = &h;
        fb.num_seqs = int(B);
        fb.num_tokens = int(B);
        fb.context_lens = put(*be, keep, lens, DType::I32);
        Tensor bt = alloc(*be, keep, DType::I32, {B, width});
        be->upload(bt, tables.data());
        fb.block_tables = bt;
        Tensor q = alloc(*be, keep, DType::BF16, {B, hq, d}),
               out = alloc(*be, keep, DType::BF16, {B, hq, d});
        const double t =
            median_seconds(*be, [&] { be->attention_decode(out, q, cache, fb, 0.088f); });
        int64_t keys = 0;
        for (int32_t l : lens) keys += l;
        const double bytes = double(keys * hkv * d * int64_t(dtype_size(kv)) * 2);
        std::printf("attention_decode %s B=%lld ctx=%s: %.1f us -> %.0f GB/s (%.0f%% of copy)\n",
                    kv == DType::BF16 ? "bf16" : "fp8 ", (long long)B,
                    ctx ? std::to_string(ctx).c_str() : "128..2048", t * 1e6, bytes / t / 1e9,
                    100 * bytes / t / 1e9 / copy_gbs);
      }
  }

  if (want("prefill")) {  // Prefill attention, one 1024-token prompt.
    const int64_t T = 1024, nb = T / bs;
    LayerKVCache cache{alloc(*be, keep, DType::BF16, {nb, bs, hkv, d}),
                       alloc(*be, keep, DType::BF16, {nb, bs, hkv, d})};
    std::vector<int32_t> table = {0, 1, 2, 3, -1}, cu = {0, int32_t(T)}, lens = {int32_t(T)};
    HostBatch h;
    ForwardBatch fb;
    fb.host = &h;
    fb.is_prefill = true;
    fb.num_seqs = 1;
    fb.num_tokens = int(T);
    fb.max_seqlen_q = int(T);
    fb.cu_seqlens_q = put(*be, keep, cu, DType::I32);
    fb.context_lens = put(*be, keep, lens, DType::I32);
    Tensor bt = alloc(*be, keep, DType::I32, {1, 5});
    be->upload(bt, table.data());
    fb.block_tables = bt;
    Tensor q = alloc(*be, keep, DType::BF16, {T, hq, d}),
           out = alloc(*be, keep, DType::BF16, {T, hq, d});
    const double t = median_seconds(*be, [&] { be->attention_prefill(out, q, cache, fb, 0.088f); });
    const double flops = 4.0 * double(d * hq) * double(T * (T + 1) / 2);
    std::printf("attention_prefill T=%lld: %.1f us -> %.1f TFLOP/s\n", (long long)T, t * 1e6,
                flops / t / 1e12);
  }

  if (want("sample")) {  // Sampling 256 rows of Qwen3's vocabulary: greedy, and the exponential
                         // race at temperature
    // 0.6 (nano-vllm's bench) over logits spread like a trained model's (normal, std 3).
    const int64_t B = 256, V = 151936;
    std::vector<float> lg(static_cast<size_t>(B * V));
    std::mt19937 gen(3);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (float& v : lg) v = nd(gen);
    Tensor logits = alloc(*be, keep, DType::F32, {B, V}), out = alloc(*be, keep, DType::I32, {B});
    be->upload(logits, lg.data());
    for (float temp : {0.0f, 0.6f}) {
      HostBatch h;
      h.temperatures.assign(size_t(B), temp);
      h.top_k.assign(size_t(B), 0);
      h.top_p.assign(size_t(B), 1.0f);
      for (int64_t b = 0; b < B; ++b) {
        h.seeds.push_back(uint64_t(b));
        h.sample_offsets.push_back(b);
      }
      h.cu_seqlens_q.assign(size_t(B + 1), 0);
      ForwardBatch fb;
      fb.host = &h;
      fb.num_seqs = int(B);
      fb.num_tokens = int(B);
      fb.temperatures = put(*be, keep, h.temperatures, DType::F32);
      fb.top_k = put(*be, keep, h.top_k, DType::I32);
      fb.top_p = put(*be, keep, h.top_p, DType::F32);
      fb.seeds = put(*be, keep, h.seeds, DType::I64);
      fb.sample_offsets = put(*be, keep, h.sample_offsets, DType::I64);
      const double t = median_seconds(*be, [&] { be->sample(out, logits, fb); });
      std::printf("sample B=%lld V=%lld temperature %.1f: %.1f us -> %.0f GB/s of logits\n",
                  (long long)B, (long long)V, temp, t * 1e6, double(B * V * 4) / t / 1e9);
    }
  }

  if (want("linear")) {  // Linear.
    const int64_t n = 3072, k = 1024;
    std::vector<uint16_t> wh(static_cast<size_t>(n * k), 0x3c00);
    LinearWeight w = be->make_linear_weight(Tensor::contiguous(wh.data(), DType::BF16, {n, k}));
    for (int64_t m : {1, 2, 4, 8, 16, 64, 256, 4096}) {
      Tensor x = alloc(*be, keep, DType::BF16, {m, k}), y = alloc(*be, keep, DType::BF16, {m, n});
      const double t = median_seconds(*be, [&] { be->linear(y, x, w, nullptr); });
      std::printf("linear M=%lld [%lld x %lld]: %.1f us -> %.0f GB/s of weights, %.1f TFLOP/s\n",
                  (long long)m, (long long)n, (long long)k, t * 1e6, double(n * k * 2) / t / 1e9,
                  2.0 * double(m * n * k) / t / 1e12);
    }
  }
  if (want("qlinear")) bench_qlinear(*be, copy_gbs);
  if (want("moe")) bench_moe(*be, copy_gbs);
  return 0;
}
