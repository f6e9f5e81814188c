// Prefill attention over the paged cache (varlen by cu_seqlens_q, prefix-cached keys included,
// causal, GQA) on the CUDA cores, for the head dims the tensor-core kernel does not take
// (attention_prefill_mma.cu; prefill_uses_mma). A CTA takes kPrefillRows query rows, the (token,
// head) pairs of up to kPrefillRows / G tokens of one sequence and the G query heads of one kv
// head, so a K/V tile in shared memory serves all of them. Each warp owns 8 rows: per 64-key tile
// a lane scores keys lane and lane + 32 for its 8 rows (register blocking over the rows), the
// warp updates each row's fp32 online softmax, then each lane accumulates P @ V for the dims it
// owns. An fp8 cache's codes become bf16 (exactly) as a tile is loaded into shared memory;
// k_scale is folded into the score scale and v_scale into the output. Under a sliding window the
// key tiles start at the one holding the first row's first key, and each row masks the keys
// below its own window.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

constexpr int kWarps = kPrefillThreads / 32;
constexpr int kRowsPerWarp = kPrefillRows / kWarps;
static_assert(kPrefillKeys == 64, "a lane scores keys lane and lane + 32");

template <int D>
struct PrefillSmem {
  static constexpr int kKStride = D + 2;  // u16; an odd number of words: conflict-free columns
  float q[kPrefillRows][D];
  uint16_t k[kPrefillKeys][kKStride];
  uint16_t v[kPrefillKeys][D];
};

// scale: the score scale times k_scale; out_scale: v_scale (1 for a bf16 cache).
template <int D, typename C>
__global__ void __launch_bounds__(kPrefillThreads)
    prefill_kernel(uint16_t* out, Rows q, int32_t hq, PagedKV kv, const int32_t* cu_seqlens_q,
                   const int32_t* context_lens, float scale, float out_scale) {
  using Elem = KvElem<C>;
  constexpr int VPT = (D + 31) / 32;  // output dims per lane
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PrefillSmem<D>& sm = *reinterpret_cast<PrefillSmem<D>*>(smem_raw);

  const int tile = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int G = hq / kv.hkv;
  const int tpc = kPrefillRows / G;
  const int q_start = cu_seqlens_q[b];
  const int seqlen_q = cu_seqlens_q[b + 1] - q_start;
  const int ctx = context_lens[b];
  const int t0 = tile * tpc;
  if (t0 >= seqlen_q) return;
  const int t_last = min(t0 + tpc, seqlen_q) - 1;
  const int kmax = query_position(ctx, seqlen_q, t_last);  // last key any row needs
  // First key any row needs (row t0's window start; 0 without a window).
  const int kmin = window_first_key(query_position(ctx, seqlen_q, t0), kv.sliding_window);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  // Rows: r -> token t0 + r / G, head kvh * G + r % G.
  for (int idx = threadIdx.x; idx < kPrefillRows * D; idx += kPrefillThreads) {
    const int r = idx / D, dim = idx % D;
    const int i = t0 + r / G;
    float val = 0.0f;
    if (r < tpc * G && i < seqlen_q) {
      const uint16_t* qp = static_cast<const uint16_t*>(q.data) + int64_t(q_start + i) * q.stride0 +
                           int64_t(kvh * G + r % G) * q.stride1;
      val = ld_bf16(qp + dim) * scale;
    }
    sm.q[r][dim] = val;
  }

  int qpos[kRowsPerWarp], qfirst[kRowsPerWarp];  // each row's keys: [qfirst, qpos]
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][VPT];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp * kRowsPerWarp + rr;
    const int i = t0 + r / G;
    qpos[rr] = (r < tpc * G && i < seqlen_q) ? query_position(ctx, seqlen_q, i) : -1;
    qfirst[rr] = window_first_key(qpos[rr], kv.sliding_window);
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int e = 0; e < VPT; ++e) acc[rr][e] = 0.0f;
  }

  const int32_t* table = kv.block_tables + int64_t(b) * kv.table_stride;
  const int64_t row = int64_t(kv.hkv) * D;
  const C* k_cache = static_cast<const C*>(kv.k);
  const C* v_cache = static_cast<const C*>(kv.v);
  for (int kt = kmin / kPrefillKeys * kPrefillKeys; kt <= kmax; kt += kPrefillKeys) {
    __syncthreads();  // the previous tile is consumed (and sm.q written, first time)
    for (int idx = threadIdx.x; idx < kPrefillKeys * (D / 8); idx += kPrefillThreads) {
      const int kk = idx / (D / 8), c = (idx % (D / 8)) * 8;
      const int j = kt + kk;
      uint4 kr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
      if (j >= kmin && j <= kmax && j < ctx) {
        const int64_t off = key_slot(table, j, kv.block_size) * row + int64_t(kvh) * D + c;
        kr = kv_as_bf16x8(Elem::load(k_cache + off));
        vr = kv_as_bf16x8(Elem::load(v_cache + off));
      }
      uint32_t* kd = reinterpret_cast<uint32_t*>(&sm.k[kk][c]);
      kd[0] = kr.x;
      kd[1] = kr.y;
      kd[2] = kr.z;
      kd[3] = kr.w;
      *reinterpret_cast<uint4*>(&sm.v[kk][c]) = vr;
    }
    __syncthreads();

    // Scores of keys kt + lane and kt + lane + 32 for the warp's rows.
    float s[kRowsPerWarp][2];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) s[rr][0] = s[rr][1] = 0.0f;
    for (int dim = 0; dim < D; dim += 2) {
      const uint32_t k0 = *reinterpret_cast<const uint32_t*>(&sm.k[lane][dim]);
      const uint32_t k1 = *reinterpret_cast<const uint32_t*>(&sm.k[lane + 32][dim]);
      const float a0 = bits_f32(k0 << 16), a1 = bits_f32(k0 & 0xffff0000u);
      const float b0 = bits_f32(k1 << 16), b1 = bits_f32(k1 & 0xffff0000u);
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const float2 qq = *reinterpret_cast<const float2*>(&sm.q[warp * kRowsPerWarp + rr][dim]);
        s[rr][0] += qq.x * a0 + qq.y * a1;
        s[rr][1] += qq.x * b0 + qq.y * b1;
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int j0 = kt + lane, j1 = kt + lane + 32;
      if (j0 > qpos[rr] || j0 < qfirst[rr]) s[rr][0] = -INFINITY;
      if (j1 > qpos[rr] || j1 < qfirst[rr]) s[rr][1] = -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(fmaxf(s[rr][0], s[rr][1])));
      if (m_new == -INFINITY) {  // no key of this row yet (below its window too, or an idle row)
        s[rr][0] = s[rr][1] = 0.0f;
        continue;
      }
      const float c = rescale_factor(m[rr], m_new);
      s[rr][0] = expf(s[rr][0] - m_new);
      s[rr][1] = expf(s[rr][1] - m_new);
      l[rr] = l[rr] * c + warp_sum(s[rr][0] + s[rr][1]);
#pragma unroll
      for (int e = 0; e < VPT; ++e) acc[rr][e] *= c;
      m[rr] = m_new;
    }
    // acc += P @ V over the tile; p of key kk comes from lane kk % 32.
    const int last = min(kPrefillKeys, kmax - kt + 1);
    for (int kk = 0; kk < last; ++kk) {
      float vv[VPT];
#pragma unroll
      for (int e = 0; e < VPT; ++e) {
        const int dim = lane * VPT + e;
        vv[e] = dim < D ? bf16_bits_to_f32(sm.v[kk][dim]) : 0.0f;
      }
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const float p = __shfl_sync(0xffffffffu, kk < 32 ? s[rr][0] : s[rr][1], kk % 32);
#pragma unroll
        for (int e = 0; e < VPT; ++e) acc[rr][e] += p * vv[e];
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    if (qpos[rr] < 0) continue;
    const int r = warp * kRowsPerWarp + rr;
    const int i = t0 + r / G;
    uint16_t* o = out + (int64_t(q_start + i) * hq + kvh * G + r % G) * D;
#pragma unroll
    for (int e = 0; e < VPT; ++e) {
      const int dim = lane * VPT + e;
      if (dim < D) st_bf16(o + dim, l[rr] > 0.0f ? acc[rr][e] / l[rr] * out_scale : 0.0f);
    }
  }
}

template <int D, typename C>
void launch_d(uint16_t* out, Rows q, int32_t hq, PagedKV kv, const int32_t* cu_seqlens_q,
              const int32_t* context_lens, int32_t num_seqs, int32_t max_seqlen_q, float scale,
              cudaStream_t stream) {
  const int smem = int(sizeof(PrefillSmem<D>));
  NV_CUDA_CHECK("attention_prefill",
                cudaFuncSetAttribute(prefill_kernel<D, C>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(unsigned(prefill_num_tiles(max_seqlen_q, hq / kv.hkv)), unsigned(kv.hkv),
                  unsigned(num_seqs));
  prefill_kernel<D, C><<<grid, kPrefillThreads, smem, stream>>>(
      out, q, hq, kv, cu_seqlens_q, context_lens, scale * kv.k_scale, kv.v_scale);
  NV_CUDA_CHECK("attention_prefill", cudaGetLastError());
}

}  // namespace

void launch_attention_prefill(uint16_t* out, Rows q, int32_t hq, PagedKV kv,
                              const int32_t* cu_seqlens_q, const int32_t* context_lens,
                              int32_t num_seqs, int32_t max_seqlen_q, float scale,
                              cudaStream_t stream) {
  if (num_seqs == 0 || max_seqlen_q == 0) return;
  if (prefill_uses_mma(kv.d)) {
    launch_attention_prefill_mma(out, q, hq, kv, cu_seqlens_q, context_lens, num_seqs,
                                 max_seqlen_q, scale, stream);
    return;
  }
  const auto run = [&](auto d) {
    if (kv.fp8) {
      launch_d<decltype(d)::value, uint8_t>(out, q, hq, kv, cu_seqlens_q, context_lens, num_seqs,
                                            max_seqlen_q, scale, stream);
    } else {
      launch_d<decltype(d)::value, uint16_t>(out, q, hq, kv, cu_seqlens_q, context_lens, num_seqs,
                                             max_seqlen_q, scale, stream);
    }
  };
  with_head_dim<256>(kv.d, run);
}

}  // namespace nanovllm::cuda
