// CudaBackend::fused_moe (Qwen3-MoE, Mixtral): per chunk of tokens, six launches on the stream
// and no host round trip (moe.cu):
//   1. router: topk_ids / topk_weights [C, k] by runtime/moe_routing.h's rule (f32);
//   2. align (one CTA): the C * k (token, slot) pairs sorted by expert into rows, the per-expert
//      row offsets, and the work items (expert, tile of its rows);
//   3. gate_up = grouped GEMM over the items: gu[row] = x[token(row)] @ gate_up[e]^T  [C k, 2I];
//      then silu_and_mul (the dense MLP's kernel) over all C k rows: act [C k, I];
//   4. down = grouped GEMM: y[row] = act[row] @ down[e]^T  [C k, H] (in gu's place);
//   5. combine: out[t] = sum_j w[t, j] * y[row(t, j)], j in routing order, f32, then bf16.
// The grids are sized by C alone (the most items C * k rows can make); CTAs past the device's
// item count exit, and an expert without rows has no items: nothing is launched per expert.
// Small chunks (the experts average <= 16 rows: decode) run the grouped GEMV, which reads each
// used expert's weights once per 16 of its rows; larger ones a tiled f32 GEMM (correct and
// simple; no tensor cores yet). Quantized experts (--quantization int8 / int4-gN: quant_linear.h's
// layout, the table then points at each expert's codes) run the same kernels, the GEMV and the
// tiled GEMM's weight-tile load dequantizing in registers (f32, as QuantizedWeight::dequantize).
// Napkin math, Qwen3-30B-A3B (E 128, k 8, H 2048, I 768): an
// expert is 9.4 MB of bf16; a decode step of B tokens reads min(128, ~8 B) of them per layer
// (B 1: 75 MB, 22 us at 3.35 TB/s; B 64: nearly all 128, 1.2 GB, 0.36 ms), plus B k rows of
// activations (noise).
//
// Graph safety: the only allocations (the scratch below, the weight-pointer table) happen on the
// first call of a size or of a layer, which the runner's warm-up makes before any capture (its
// largest prefill and decode, then each bucket eagerly); during capture either would fail with
// a message instead. Nothing is downloaded. The scratch holds one chunk (moe_chunk_tokens keeps
// it under kMoeScratchBytes) and grows only; a captured graph keeps the layout of its size.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// What the grouped GEMMs read of one kind of expert weight [n, k] (all experts share `first`'s
// scheme: moe_weight_table checks it): the table, and for a quantized scheme its layout.
MoeExpertWeights expert_weights(const void* const* table, const LinearWeight& first) {
  MoeExpertWeights w;
  w.table = table;
  w.quantized = first.quant.enabled();
  if (w.quantized) {
    const QuantDeviceLayout l = quant_device_layout(first.quant.format == QuantFormat::Int4,
                                                    first.quant.group, first.n, first.k);
    w.layout.n = first.n;
    w.layout.k = first.k;
    w.layout.row_bytes = l.row_bytes;
    w.layout.groups = int32_t(l.groups);
    w.layout.group = int32_t(l.group);
    w.layout.int4 = l.int4;
    w.scales_offset = l.scales_offset;
  }
  return w;
}

// The scratch of one chunk of `tokens` tokens, carved from `base` (256-byte aligned pieces).
struct MoeScratch {
  MoeRouting routing;
  uint16_t* gu_y = nullptr;  // [n, max(2I, H)]: gate | up rows, then the down GEMM's rows
  uint16_t* act = nullptr;   // [n, I] silu(gate) * up
  size_t bytes = 0;
};

MoeScratch moe_scratch(char* base, int64_t tokens, int64_t top_k, int64_t num_experts,
                       int64_t max_items, int64_t hidden, int64_t intermediate) {
  const int64_t n = tokens * top_k;
  size_t at = 0;
  auto take = [&](int64_t bytes) {
    void* p = base ? base + at : nullptr;
    at += (size_t(bytes) + 255) / 256 * 256;
    return p;
  };
  MoeScratch s;
  s.routing.topk_ids = static_cast<int32_t*>(take(4 * n));
  s.routing.topk_weights = static_cast<float*>(take(4 * n));
  s.routing.expert_offsets = static_cast<int32_t*>(take(4 * (num_experts + 1)));
  s.routing.pair_row = static_cast<int32_t*>(take(4 * n));
  s.routing.row_token = static_cast<int32_t*>(take(4 * n));
  s.routing.items = static_cast<int32_t*>(take(8 * max_items));
  s.routing.num_items = static_cast<int32_t*>(take(4));
  s.gu_y = static_cast<uint16_t*>(take(2 * n * std::max(2 * intermediate, hidden)));
  s.act = static_cast<uint16_t*>(take(2 * n * intermediate));
  s.bytes = at;
  return s;
}

}  // namespace

const void* const* CudaBackend::moe_weight_table(const MoeWeights& w, int64_t hidden,
                                                 int64_t intermediate) {
  const size_t E = w.gate_up.size();
  const MoeWeights* key = &w;  // (a named key: no temporary bound to operator[]'s reference)
  MoeTable& table = moe_tables_[key];
  bool same = table.device.data() && table.host.size() == 2 * E;
  for (size_t e = 0; same && e < E; ++e)
    same = table.host[e] == w.gate_up[e].data.data && table.host[E + e] == w.down[e].data.data;
  if (same) return static_cast<const void* const*>(table.device.data());
  NV_CHECK(!capturing(),
           "cuda fused_moe: the experts' weight table is made on their first use, which must come "
           "before graph capture (warm up first)");
  for (size_t e = 0; e < E; ++e) {
    for (const LinearWeight* lw : {&w.gate_up[e], &w.down[e]}) {
      const bool up = lw == &w.gate_up[e];
      // Every expert of a kind in expert 0's scheme (expert_weights describes them all by it).
      const QuantScheme want = up ? w.gate_up[0].quant : w.down[0].quant;
      const bool quantized = lw->quant.enabled();
      const bool int4 = lw->quant.format == QuantFormat::Int4;
      const bool format_ok =
          quantized ? (lw->quant.format == QuantFormat::Int8 || int4) &&
                          lw->quant.group >= (int4 ? 8 : 0) && lw->quant.group % 8 == 0 &&
                          lw->data.nbytes() >=
                              quant_device_layout(int4, lw->quant.group, lw->n, lw->k).bytes
                    : lw->data.dtype == DType::BF16;
      NV_CHECK(lw->quant.format == want.format && lw->quant.group == want.group && format_ok &&
                   lw->data.device == DeviceKind::CUDA && lw->data.is_contiguous() &&
                   aligned16(lw->data.data) && lw->n == (up ? 2 * intermediate : hidden) &&
                   lw->k == (up ? hidden : intermediate),
               "cuda fused_moe: expert {} {} is {} [{}, {}] ({}); expected [{}, {}] on the "
               "device, bf16 or quantized for the CUDA backend as expert 0 ({})",
               e, up ? "gate_up" : "down", lw->data.describe(), lw->n, lw->k,
               quantization_name(lw->quant), up ? 2 * intermediate : hidden,
               up ? hidden : intermediate, quantization_name(want));
    }
  }
  // Graphs captured with the old table keep reading it: retire it rather than free it.
  if (table.device.data()) retired_ws_.push_back(std::move(table.device));
  table.device = alloc(2 * E * sizeof(void*));
  table.host.resize(2 * E);
  for (size_t e = 0; e < E; ++e) {
    table.host[e] = w.gate_up[e].data.data;
    table.host[E + e] = w.down[e].data.data;
  }
  upload(table.device.as(DType::I64, {int64_t(2 * E)}), table.host.data());
  return static_cast<const void* const*>(table.device.data());
}

void CudaBackend::fused_moe(Tensor out, Tensor x, Tensor router_logits, const MoeWeights& w,
                            int top_k, bool renormalize) {
  use_device();
  const int64_t E = w.num_experts();
  NV_CHECK(E > 0 && E <= kMoeMaxExperts && int64_t(w.down.size()) == E,
           "cuda fused_moe: {} gate_up and {} down experts (1 to {} supported)", E, w.down.size(),
           kMoeMaxExperts);
  NV_CHECK(x.ndim == 2 && out.ndim == 2 && x.dtype == DType::BF16 && out.dtype == DType::BF16 &&
               x.device == DeviceKind::CUDA && out.device == DeviceKind::CUDA && x.stride[1] == 1 &&
               out.stride[1] == 1 && out.shape[0] == x.shape[0] && out.shape[1] == x.shape[1] &&
               x.shape[1] == w.gate_up[0].k && out.data != x.data,
           "cuda fused_moe out {} x {} for experts [{}, {}]", out.describe(), x.describe(),
           w.gate_up[0].n, w.gate_up[0].k);
  NV_CHECK(router_logits.ndim == 2 && router_logits.dtype == DType::F32 &&
               router_logits.device == DeviceKind::CUDA && router_logits.shape[0] == x.shape[0] &&
               router_logits.shape[1] == E && router_logits.stride[1] == 1,
           "cuda fused_moe router_logits {} for {} experts", router_logits.describe(), E);
  NV_CHECK(top_k >= 1 && top_k <= E, "cuda fused_moe top_k {} of {} experts", top_k, E);
  const int64_t T = x.shape[0], H = x.shape[1], I = w.down[0].k, k = top_k;
  NV_CHECK(H % 8 == 0 && I % 8 == 0 && x.stride[0] % 8 == 0 && out.stride[0] % 8 == 0 &&
               aligned16(x.data) && aligned16(out.data),
           "cuda fused_moe: hidden {} and intermediate {} must be multiples of 8, x {} and out {} "
           "rows 16-byte aligned",
           H, I, x.describe(), out.describe());
  if (T == 0) return;
  const void* const* table = moe_weight_table(w, H, I);
  const MoeExpertWeights gate_up = expert_weights(table, w.gate_up[0]);
  const MoeExpertWeights down = expert_weights(table + E, w.down[0]);

  // Bytes per row of the scratch: 4 i32 / f32 entries, 2 items at most, the gu_y and act rows.
  const int64_t row_bytes = 16 + 8 + 2 * (std::max(2 * I, H) + I);
  const int64_t chunk = moe_chunk_tokens(T, k, row_bytes);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t C = std::min(chunk, T - t0), n = C * k;
    const bool tiled = moe_use_tiled(C, k, E);
    const int tile_rows = moe_tile_rows(C, k, E);
    const int64_t max_items = moe_max_items(n, E, tile_rows);
    NV_CHECK(max_items <= 65535, "cuda fused_moe: {} work items exceed the grid", max_items);
    const size_t bytes = moe_scratch(nullptr, C, k, E, max_items, H, I).bytes;
    char* base = static_cast<char*>(grow_workspace(moe_ws_, bytes, "fused_moe"));
    const MoeScratch s = moe_scratch(base, C, k, E, max_items, H, I);
    const MoeRouting& r = s.routing;
    const uint16_t* xc = x.ptr<const uint16_t>() + t0 * x.stride[0];
    launch_moe_route(r, router_logits.ptr<const float>() + t0 * router_logits.stride[0],
                     router_logits.stride[0], C, int(E), top_k, renormalize, stream_);
    launch_moe_align(r, C, int(E), top_k, tile_rows, stream_);
    launch_moe_gemm(s.gu_y, 2 * I, xc, x.stride[0], r.row_token, gate_up, r, max_items, tiled,
                    tile_rows, 2 * I, H, stream_);
    launch_silu_and_mul(s.act, I, s.gu_y, 2 * I, n, I, stream_);
    launch_moe_gemm(s.gu_y, H, s.act, I, nullptr, down, r, max_items, tiled, tile_rows, H, I,
                    stream_);
    launch_moe_combine(out.ptr<uint16_t>() + t0 * out.stride[0], out.stride[0], s.gu_y, H, r, C,
                       top_k, H, stream_);
  }
}

}  // namespace nanovllm::cuda
