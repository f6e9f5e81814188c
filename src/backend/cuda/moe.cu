// fused_moe's kernels (vLLM's fused_moe idea, without a host round trip): the router (softmax
// and top-k per token), a one-CTA counting sort of the (token, slot) pairs by expert that also
// lists the work items, the grouped expert GEMM over those items (a GEMV when experts have few
// rows, a tiled kernel otherwise) and the weighted combine. Every count lives on the device: the
// grids are sized for the most items a chunk can have and CTAs past the device's count exit, so
// a decode step is captured once and replays for any routing.
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/quant_unpack.cuh"

namespace nanovllm::cuda {

namespace {

// One warp per token: p = softmax(logits) in f32, the top_k experts by logit in descending order
// (ties: the lower index first), weights[j] = p of the j-th, divided by their sum (in j order)
// when renormalize: runtime/moe_routing.h's moe_route (only the order of the softmax sum
// differs). Pick j is the largest (logit, -index) below pick j - 1, so nothing is marked taken.
__global__ void __launch_bounds__(kMoeRouterWarps * 32)
    moe_route_kernel(int32_t* ids, float* weights, const float* logits, int64_t logits_stride,
                     int64_t tokens, int num_experts, int top_k, bool renormalize) {
  const int64_t t = int64_t(blockIdx.x) * kMoeRouterWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;  // the whole warp
  const float* l = logits + t * logits_stride;
  float mx = -INFINITY;
  for (int e = lane; e < num_experts; e += 32) mx = fmaxf(mx, l[e]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int e = lane; e < num_experts; e += 32) sum += expf(l[e] - mx);
  sum = warp_sum(sum);
  int32_t* id = ids + t * top_k;
  float* w = weights + t * top_k;
  float prev_v = 0.0f, picked = 0.0f;
  int prev_e = -1;
  for (int j = 0; j < top_k; ++j) {
    float bv = -INFINITY;
    int be = -1;
    for (int e = lane; e < num_experts; e += 32) {  // ascending: a tie keeps the lower index
      const float v = l[e];
      const bool below_prev = prev_e < 0 || v < prev_v || (v == prev_v && e > prev_e);
      if (below_prev && (be < 0 || v > bv)) {
        bv = v;
        be = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {  // butterfly: every lane ends with the warp's best
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (oe >= 0 && (be < 0 || ov > bv || (ov == bv && oe < be))) {
        bv = ov;
        be = oe;
      }
    }
    prev_v = bv;
    prev_e = be;
    const float p = expf(bv - mx) / sum;
    picked += p;
    if (lane == 0) {
      id[j] = be;
      w[j] = p;
    }
  }
  if (renormalize && lane == 0)
    for (int j = 0; j < top_k; ++j) w[j] /= picked;
}

// Inclusive prefix sums of a[0, n) and b[0, n) in place (Hillis-Steele); every thread of the
// CTA calls it, n <= blockDim.x.
__device__ void block_inclusive_scan2(int32_t* a, int32_t* b, int n) {
  const int i = threadIdx.x;
  for (int o = 1; o < n; o <<= 1) {
    int32_t va = 0, vb = 0;
    if (i < n && i >= o) {
      va = a[i - o];
      vb = b[i - o];
    }
    __syncthreads();
    if (i < n) {
      a[i] += va;
      b[i] += vb;
    }
    __syncthreads();
  }
}

// One CTA: a stable counting sort of the n = tokens * top_k pairs by expert. Thread
// (s, e) = (tid / E, tid % E) owns expert e in segment s of the pairs (S = threads / E segments,
// in pair order): it counts its pairs, and after the scans over experts places them, so rows keep
// pair order within an expert and every run sorts alike (no atomics). Thread e < E then lists
// expert e's work items: tiles of tile_rows of its rows, experts in order. Work per thread: two
// passes over n / S pairs (decode: a few; a 4k-token prefill of 128 experts: 2 x 4k).
__global__ void __launch_bounds__(kMoeAlignThreads)
    moe_align_kernel(MoeRouting r, int64_t n, int num_experts, int top_k, int tile_rows) {
  __shared__ int32_t counts[kMoeAlignThreads];  // [S, E] pairs of expert e in segment s
  __shared__ int32_t rows[kMoeMaxExperts];      // rows per expert, then their prefix sums
  __shared__ int32_t tiles[kMoeMaxExperts];     // tiles per expert, then their prefix sums
  const int tid = threadIdx.x, E = num_experts;
  const int S = kMoeAlignThreads / E;
  const int s = tid / E, e = tid % E;
  const int64_t seg = (n + S - 1) / S;
  const int64_t p0 = s < S && s * seg < n ? s * seg : n;  // segment [p0, p1) of the pairs
  const int64_t p1 = p0 + seg < n ? p0 + seg : n;
  int32_t c = 0;
  for (int64_t p = p0; p < p1; ++p) c += r.topk_ids[p] == e;
  counts[tid] = c;
  __syncthreads();
  int32_t my_rows = 0, my_tiles = 0;
  if (tid < E) {
    for (int q = 0; q < S; ++q) my_rows += counts[q * E + tid];
    my_tiles = (my_rows + tile_rows - 1) / tile_rows;
    rows[tid] = my_rows;
    tiles[tid] = my_tiles;
  }
  __syncthreads();
  block_inclusive_scan2(rows, tiles, E);
  int32_t first_row = 0, first_tile = 0;
  if (tid < E) {
    first_row = rows[tid] - my_rows;
    first_tile = tiles[tid] - my_tiles;
    if (tid == E - 1) {
      r.expert_offsets[E] = rows[tid];  // n
      *r.num_items = tiles[tid];
    }
  }
  __syncthreads();  // every inclusive sum read: now the exclusive ones
  if (tid < E) {
    rows[tid] = first_row;
    r.expert_offsets[tid] = first_row;
    for (int32_t q = 0; q < my_tiles; ++q) {
      r.items[2 * (first_tile + q)] = tid;
      r.items[2 * (first_tile + q) + 1] = first_row + q * tile_rows;
    }
  }
  __syncthreads();
  if (s < S) {
    int32_t row = rows[e];
    for (int q = 0; q < s; ++q) row += counts[q * E + e];
    for (int64_t p = p0; p < p1; ++p) {
      if (r.topk_ids[p] != e) continue;
      r.pair_row[p] = row;
      r.row_token[row] = int32_t(p / top_k);
      ++row;
    }
  }
}

// The experts' weight format, a template parameter of the grouped GEMMs: bf16 rows, or
// quant_linear.h's int8 / int4 layout dequantized in registers (quant_unpack.cuh).
enum MoeFormat : int { kMoeBf16 = 0, kMoeInt8 = 1, kMoeInt4 = 2 };

// Expert e's quantized weight (kMoeInt8 / kMoeInt4): its codes and scales in the shared layout.
__device__ __forceinline__ QuantWeightView moe_quant_expert(const MoeExpertWeights& w, int e) {
  QuantWeightView v = w.layout;
  v.codes = static_cast<const uint8_t*>(w.table[e]);
  v.scales = reinterpret_cast<const uint32_t*>(v.codes + w.scales_offset);
  return v;
}

// Where row `row` of a grouped GEMM reads its x: row_token[row] (the gate_up GEMM gathers the
// tokens' hidden rows), or the row itself (the down GEMM reads the sorted activations).
__device__ __forceinline__ const uint16_t* moe_x_row(const uint16_t* x, int64_t x_stride,
                                                     const int32_t* row_token, int32_t row) {
  return x + int64_t(row_token ? row_token[row] : row) * x_stride;
}

// The grouped GEMV (decode): CTA (column block, item) computes columns [4 blockIdx.x, + 4) of the
// item's m <= MT rows, one warp per column as the dense GEMV (gemv.cuh: the same lanes and order,
// so a row's result depends on neither MT nor its neighbours). Bytes: each item reads its
// expert's [n, k] weight once, so a decode step whose experts have <= MT rows reads each used
// expert once and nothing of the others (Qwen3-30B-A3B: 9.4 MB per expert for gate_up + down;
// batch 1 reads 8 of them, 75 MB a layer, 22 us at 3.35 TB/s). Quantized experts: the dense
// quantized GEMV's lane loop (quant_lane_dots), int8 half and int4 a quarter of those bytes.
template <int MT, int kFmt>
__global__ void __launch_bounds__(kGemvWarps * 32)
    moe_gemv_kernel(uint16_t* out, int64_t out_stride, const uint16_t* __restrict__ x,
                    int64_t x_stride, const int32_t* row_token, MoeExpertWeights weights,
                    const int32_t* expert_offsets, const int32_t* items, const int32_t* num_items,
                    int64_t n, int64_t k) {
  const int item = blockIdx.y;
  if (item >= *num_items) return;  // the whole CTA
  const int e = items[2 * item], r0 = items[2 * item + 1];
  const int m = min(MT, expert_offsets[e + 1] - r0);
  const int64_t col = int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (col >= n) return;  // the whole warp
  const uint16_t* xr[MT];
#pragma unroll
  for (int i = 0; i < MT; ++i) xr[i] = i < m ? moe_x_row(x, x_stride, row_token, r0 + i) : x;
  float acc[MT];
#pragma unroll
  for (int i = 0; i < MT; ++i) acc[i] = 0.0f;
  const auto x_row = [&](int i) { return xr[i]; };
  if constexpr (kFmt == kMoeBf16) {
    gemv_lane_dots<MT>(acc, static_cast<const uint16_t*>(weights.table[e]) + col * k, x_row, m, k,
                       lane);
  } else {
    quant_lane_dots<MT, kFmt == kMoeInt4>(acc, moe_quant_expert(weights, e), col, x_row, m, lane);
  }
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    if (i >= m) break;  // m is the same for the whole CTA: no lane leaves a shuffle
    const float v = warp_sum(acc[i]);
    if (lane == 0) st_bf16(out + int64_t(r0 + i) * out_stride + col, v);
  }
}

// The tiled grouped GEMM (prefill): CTA (column tile, item) computes a kMoeTileM x kMoeTileN
// tile of out = x_rows @ w[e]^T with f32 FMAs (no tensor cores yet): k steps of kMoeTileK staged
// in shared memory as f32, each thread 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j). Each
// output sums over k in ascending order whatever its place in the tile, so a row's result does not
// depend on the rows beside it. Bytes: per k step 2 x 64 x 32 x 2 B = 8 KB (L2) for 131k FMAs;
// an expert's weight is read once per 64 of its rows. Quantized experts: each loader thread
// dequantizes its unit of 8 k (quant_unpack.cuh) into the f32 weight tile.
template <int kFmt>
__global__ void __launch_bounds__(kMoeTileThreads)
    moe_gemm_tiled_kernel(uint16_t* out, int64_t out_stride, const uint16_t* __restrict__ x,
                          int64_t x_stride, const int32_t* row_token,
                          MoeExpertWeights weights, const int32_t* expert_offsets,
                          const int32_t* items, const int32_t* num_items, int64_t n, int64_t k) {
  static_assert(kMoeTileThreads == 256 && kMoeTileM == 64 && kMoeTileN == 64 && kMoeTileK == 32,
                "the loaders below assume these");
  __shared__ float xs[kMoeTileK][kMoeTileM + 1];  // [k, row] of the x tile (+1: no bank conflicts)
  __shared__ float ws[kMoeTileK][kMoeTileN + 1];  // [k, column] of the weight tile
  const int item = blockIdx.y;
  if (item >= *num_items) return;  // the whole CTA
  const int e = items[2 * item], r0 = items[2 * item + 1];
  const int m = min(kMoeTileM, expert_offsets[e + 1] - r0);
  const int64_t n0 = int64_t(blockIdx.x) * kMoeTileN;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  // Loader: tile row (and weight row) lr, elements [kc, kc + 8) of each k step.
  const int lr = tid / 4, kc = tid % 4 * 8;
  const uint16_t* xrow = lr < m ? moe_x_row(x, x_stride, row_token, r0 + lr) : nullptr;
  const bool w_in = n0 + lr < n;
  const uint16_t* wrow = nullptr;
  QuantWeightView wq;
  if constexpr (kFmt == kMoeBf16) {
    if (w_in) wrow = static_cast<const uint16_t*>(weights.table[e]) + (n0 + lr) * k;
  } else {
    wq = moe_quant_expert(weights, e);
  }
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int64_t k0 = 0; k0 < k; k0 += kMoeTileK) {
    const bool in_k = k0 + kc < k;  // k % 8 == 0: a chunk lies all inside or all outside
    float xf[8], wf[8];
    if (xrow && in_k) {
      load8(xrow + k0 + kc, xf);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) xf[i] = 0.0f;
    }
    if (w_in && in_k) {
      if constexpr (kFmt == kMoeBf16) {
        load8(wrow + k0 + kc, wf);
      } else {
        const int64_t u = (k0 + kc) / 8;
        quant_unpack_unit<kFmt == kMoeInt4>(wq, n0 + lr, u,
                                            quant_load_unit<kFmt == kMoeInt4>(wq, n0 + lr, u), wf);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) wf[i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      xs[kc + i][lr] = xf[i];
      ws[kc + i][lr] = wf[i];
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kMoeTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[kk][ty + 16 * i];
        b[i] = ws[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = ty + 16 * i;
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = n0 + tx + 16 * j;
      if (col < n) st_bf16(out + int64_t(r0 + row) * out_stride + col, acc[i][j]);
    }
  }
}

// out[t] = sum_j topk_weights[t, j] * y[pair_row[t * top_k + j]], j = 0..top_k-1 in order, f32,
// 8 columns per thread (the CPU's order: batch invariant). Bytes: top_k + 1 rows of 2 H per token.
__global__ void moe_combine_kernel(uint16_t* out, int64_t out_stride, const uint16_t* y,
                                   int64_t y_stride, const float* topk_weights,
                                   const int32_t* pair_row, int64_t tokens, int top_k,
                                   int64_t hidden) {
  const int64_t chunks = hidden / 8, total = tokens * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / chunks, c = (i % chunks) * 8;
    float acc[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) acc[q] = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const float w = topk_weights[t * top_k + j];
      float v[8];
      load8(y + int64_t(pair_row[t * top_k + j]) * y_stride + c, v);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] += w * v[q];
    }
    store8(out + t * out_stride + c, acc);
  }
}

template <int MT, int kFmt>
void launch_gemv_mt(uint16_t* out, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                    const int32_t* row_token, const MoeExpertWeights& weights, const MoeRouting& r,
                    int64_t max_items, int64_t n, int64_t k, cudaStream_t stream) {
  const dim3 grid(unsigned((n + kGemvWarps - 1) / kGemvWarps), unsigned(max_items));
  moe_gemv_kernel<MT, kFmt><<<grid, kGemvWarps * 32, 0, stream>>>(
      out, out_stride, x, x_stride, row_token, weights, r.expert_offsets, r.items, r.num_items, n,
      k);
}

template <int kFmt>
void launch_gemm_format(uint16_t* out, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                        const int32_t* row_token, const MoeExpertWeights& weights,
                        const MoeRouting& r, int64_t max_items, bool tiled, int tile_rows,
                        int64_t n, int64_t k, cudaStream_t stream) {
  if (tiled) {
    const dim3 grid(unsigned((n + kMoeTileN - 1) / kMoeTileN), unsigned(max_items));
    moe_gemm_tiled_kernel<kFmt><<<grid, kMoeTileThreads, 0, stream>>>(
        out, out_stride, x, x_stride, row_token, weights, r.expert_offsets, r.items, r.num_items, n,
        k);
    return;
  }
  switch (tile_rows) {
    case 1:
      launch_gemv_mt<1, kFmt>(out, out_stride, x, x_stride, row_token, weights, r, max_items, n, k,
                              stream);
      break;
    case 2:
      launch_gemv_mt<2, kFmt>(out, out_stride, x, x_stride, row_token, weights, r, max_items, n, k,
                              stream);
      break;
    case 4:
      launch_gemv_mt<4, kFmt>(out, out_stride, x, x_stride, row_token, weights, r, max_items, n, k,
                              stream);
      break;
    case 8:
      launch_gemv_mt<8, kFmt>(out, out_stride, x, x_stride, row_token, weights, r, max_items, n, k,
                              stream);
      break;
    default:
      launch_gemv_mt<16, kFmt>(out, out_stride, x, x_stride, row_token, weights, r, max_items, n,
                               k, stream);
      break;
  }
}

}  // namespace

void launch_moe_route(const MoeRouting& r, const float* logits, int64_t logits_stride,
                      int64_t tokens, int num_experts, int top_k, bool renormalize,
                      cudaStream_t stream) {
  if (tokens == 0) return;
  const unsigned grid = unsigned((tokens + kMoeRouterWarps - 1) / kMoeRouterWarps);
  moe_route_kernel<<<grid, kMoeRouterWarps * 32, 0, stream>>>(
      r.topk_ids, r.topk_weights, logits, logits_stride, tokens, num_experts, top_k, renormalize);
  NV_CUDA_CHECK("fused_moe (router)", cudaGetLastError());
}

void launch_moe_align(const MoeRouting& r, int64_t tokens, int num_experts, int top_k,
                      int tile_rows, cudaStream_t stream) {
  if (tokens == 0) return;
  moe_align_kernel<<<1, kMoeAlignThreads, 0, stream>>>(r, tokens * top_k, num_experts, top_k,
                                                       tile_rows);
  NV_CUDA_CHECK("fused_moe (align)", cudaGetLastError());
}

void launch_moe_gemm(uint16_t* out, int64_t out_stride, const uint16_t* x, int64_t x_stride,
                     const int32_t* row_token, const MoeExpertWeights& weights, const MoeRouting& r,
                     int64_t max_items, bool tiled, int tile_rows, int64_t n, int64_t k,
                     cudaStream_t stream) {
  if (max_items == 0 || n == 0) return;
  if (!weights.quantized) {
    launch_gemm_format<kMoeBf16>(out, out_stride, x, x_stride, row_token, weights, r, max_items,
                                 tiled, tile_rows, n, k, stream);
  } else if (weights.layout.int4) {
    launch_gemm_format<kMoeInt4>(out, out_stride, x, x_stride, row_token, weights, r, max_items,
                                 tiled, tile_rows, n, k, stream);
  } else {
    launch_gemm_format<kMoeInt8>(out, out_stride, x, x_stride, row_token, weights, r, max_items,
                                 tiled, tile_rows, n, k, stream);
  }
  NV_CUDA_CHECK("fused_moe (expert gemm)", cudaGetLastError());
}

void launch_moe_combine(uint16_t* out, int64_t out_stride, const uint16_t* y, int64_t y_stride,
                        const MoeRouting& r, int64_t tokens, int top_k, int64_t hidden,
                        cudaStream_t stream) {
  if (tokens * hidden == 0) return;
  moe_combine_kernel<<<unsigned(blocks_for(tokens * hidden / 8, 256)), 256, 0, stream>>>(
      out, out_stride, y, y_stride, r.topk_weights, r.pair_row, tokens, top_k, hidden);
  NV_CUDA_CHECK("fused_moe (combine)", cudaGetLastError());
}

}  // namespace nanovllm::cuda
