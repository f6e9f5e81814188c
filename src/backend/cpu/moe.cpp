// fused_moe on the CPU: the step's (token, expert) pairs grouped by expert, then one GEMM per
// expert over its rows (gate_up, silu_and_mul, down: the dense MLP's ops and kernels, bf16 or
// quantized; whole experts per thread when there are enough of them), and each token's rows
// summed back with its routing weights.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "runtime/moe_routing.h"

namespace nanovllm::cpu {

// Active experts per thread from which fused_moe runs whole experts per thread.
constexpr int64_t kExpertsPerThread = 4;

void CpuBackend::fused_moe(Tensor out, Tensor x, Tensor router_logits, const MoeWeights& w,
                           int top_k, bool renormalize) {
  const int64_t E = w.num_experts();
  NV_CHECK(E > 0 && int64_t(w.down.size()) == E, "fused_moe: {} gate_up and {} down experts", E,
           w.down.size());
  NV_CHECK(x.ndim == 2 && out.ndim == 2 && x.dtype == DType::F32 && out.dtype == DType::F32 &&
               x.stride[1] == 1 && out.stride[1] == 1 && out.shape[0] == x.shape[0] &&
               out.shape[1] == x.shape[1] && x.shape[1] == w.gate_up[0].k && out.data != x.data,
           "fused_moe out {} x {} for experts [{}, {}]", out.describe(), x.describe(),
           w.gate_up[0].n, w.gate_up[0].k);
  NV_CHECK(router_logits.ndim == 2 && router_logits.dtype == DType::F32 &&
               router_logits.shape[0] == x.shape[0] && router_logits.shape[1] == E &&
               router_logits.stride[1] == 1,
           "fused_moe router_logits {} for {} experts", router_logits.describe(), E);
  NV_CHECK(top_k >= 1 && top_k <= E, "fused_moe top_k {} of {} experts", top_k, E);
  const int64_t T = x.shape[0], H = x.shape[1], I = w.down[0].k, k = top_k;

  // Routing of every token: ids / weights [T, k].
  std::vector<int32_t> ids(size_t(T * k));
  std::vector<float> weights(size_t(T * k));
  for (int64_t t = 0; t < T; ++t) {
    moe_route(router_logits.ptr<const float>() + t * router_logits.stride[0], int(E), top_k,
              renormalize, &ids[size_t(t * k)], &weights[size_t(t * k)]);
  }

  // Tokens in chunks of at most kMaxRows (token, expert) rows, so the scratch stays bounded
  // (f32 [R, H + 2I + I + H]: 105 MB at R 4096 on Qwen3-30B-A3B's shape).
  constexpr int64_t kMaxRows = 4096;
  const int64_t chunk = std::max<int64_t>(1, kMaxRows / k);
  const int64_t R = std::min(T, chunk) * k;
  const size_t need = size_t(R * (2 * H + 3 * I)) * sizeof(float);
  if (moe_scratch_.bytes() < need) moe_scratch_ = alloc(need);
  char* base = static_cast<char*>(moe_scratch_.data());
  Tensor xs = Tensor::contiguous(base, DType::F32, {R, H}, DeviceKind::CPU);       // gathered x
  Tensor gu = Tensor::contiguous(static_cast<float*>(xs.data) + R * H, DType::F32, {R, 2 * I},
                                 DeviceKind::CPU);                                  // gate | up
  Tensor act = Tensor::contiguous(static_cast<float*>(gu.data) + R * 2 * I, DType::F32, {R, I},
                                  DeviceKind::CPU);                                 // silu(gate) * up
  Tensor ys = Tensor::contiguous(static_cast<float*>(act.data) + R * I, DType::F32, {R, H},
                                 DeviceKind::CPU);                                  // expert outputs

  std::vector<int64_t> offsets(size_t(E + 1));
  std::vector<int64_t> row_of(static_cast<size_t>(R));  // (token - t0) * k + j -> its row in xs / ys
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t t1 = std::min(T, t0 + chunk), n = (t1 - t0) * k;
    // Counting sort of the chunk's pairs by expert (stable: by token within an expert).
    std::fill(offsets.begin(), offsets.end(), 0);
    for (int64_t s = 0; s < n; ++s) ++offsets[size_t(ids[size_t(t0 * k + s)]) + 1];
    for (int64_t e = 0; e < E; ++e) offsets[size_t(e + 1)] += offsets[size_t(e)];
    std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
    for (int64_t s = 0; s < n; ++s) row_of[size_t(s)] = next[size_t(ids[size_t(t0 * k + s)])]++;
    parallel_rows(n, H, [&](int64_t begin, int64_t end) {  // xs[row_of[s]] = x[t0 + s / k]
      for (int64_t s = begin; s < end; ++s) {
        std::memcpy(xs.ptr<float>() + row_of[size_t(s)] * H,
                    x.ptr<const float>() + (t0 + s / k) * x.stride[0], size_t(H) * sizeof(float));
      }
    });
    // The experts with rows, most rows first.
    std::vector<int64_t> active;
    for (int64_t e = 0; e < E; ++e)
      if (offsets[size_t(e + 1)] > offsets[size_t(e)]) active.push_back(e);
    std::stable_sort(active.begin(), active.end(), [&](int64_t a, int64_t b) {
      return offsets[size_t(a + 1)] - offsets[size_t(a)] > offsets[size_t(b + 1)] - offsets[size_t(b)];
    });
    const int threads = pool_.size();
    if (threads > 1 && int64_t(active.size()) >= kExpertsPerThread * threads) {
      // Expert-parallel: each thread takes whole experts from a shared counter and runs them on
      // its own single-thread pool, so a step costs one dispatch instead of three per expert
      // (with them, the expert loop of a 16-sequence step on Qwen3-30B-A3B's shape streamed its
      // weights at 60% of the read bandwidth).
      // An expert's rows go through the same kernels in the same order as on the whole pool
      // (the GEMMs' results do not depend on the thread count), so outputs are unchanged.
      if (expert_lanes_.empty())
        for (int i = 0; i < threads; ++i) expert_lanes_.push_back(std::make_unique<ExpertLane>());
      std::atomic<size_t> next{0};
      pool_.run_shared([&](int tid) {
        ExpertLane& lane = *expert_lanes_[size_t(tid)];
        for (size_t i = next.fetch_add(1); i < active.size(); i = next.fetch_add(1)) {
          const int64_t e = active[i], r0 = offsets[size_t(e)], r1 = offsets[size_t(e + 1)];
          linear_on(lane.pool, lane.scratch, gu.slice_rows(r0, r1), xs.slice_rows(r0, r1),
                    w.gate_up[size_t(e)], nullptr);
          silu_and_mul_rows(act.slice_rows(r0, r1), gu.slice_rows(r0, r1), 0, r1 - r0);
          linear_on(lane.pool, lane.scratch, ys.slice_rows(r0, r1), act.slice_rows(r0, r1),
                    w.down[size_t(e)], nullptr);
        }
      });
    } else {
      for (int64_t e : active) {  // few experts: each on the whole pool
        const int64_t r0 = offsets[size_t(e)], r1 = offsets[size_t(e + 1)];
        linear(gu.slice_rows(r0, r1), xs.slice_rows(r0, r1), w.gate_up[size_t(e)], nullptr);
        silu_and_mul(act.slice_rows(r0, r1), gu.slice_rows(r0, r1));
        linear(ys.slice_rows(r0, r1), act.slice_rows(r0, r1), w.down[size_t(e)], nullptr);
      }
    }
    // out[t] = sum_j weights[t, j] * ys[row of (t, j)], j in routing order (batch invariant).
    parallel_rows(t1 - t0, k * H, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* o = out.ptr<float>() + (t0 + t) * out.stride[0];
        std::fill(o, o + H, 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const float wj = weights[size_t((t0 + t) * k + j)];
          const float* y = ys.ptr<const float>() + row_of[size_t(t * k + j)] * H;
          for (int64_t i = 0; i < H; ++i) o[i] += wj * y[i];
        }
      }
    });
  }
}

}  // namespace nanovllm::cpu
