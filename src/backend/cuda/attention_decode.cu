// Decode attention: split-K flash-decoding over the paged cache. A CTA serves one (sequence,
// kv head, partition of kDecodePartitionKeys keys) for all the query heads of that kv head, so
// each K/V row is read once per step. Inside the CTA, groups of D/E lanes (E elements a lane:
// lane_elems) each take one key at a time (16-byte loads of bf16, 8 or 16 bytes of fp8; U keys
// in flight) with an fp32 online softmax in log2 units, rescaled once
// per chunk of U keys (one exp2 per key and head); the groups merge in shared memory. A sequence
// with one partition writes its output directly; longer ones write (o, m, l) per partition, and
// the CTA that completes a (sequence, kv head)'s last partition (a counter per pair) merges them
// by log-sum-exp, in partition order, in the same launch. The partitions of a sequence depend only
// on its own context length, so its output never depends on the batch. Under a sliding window of W
// keys only the keys [ctx - W, ctx) are read: the partitions stay the kP-aligned ones (a function
// of ctx and W), from the one that holds key ctx - W on, the first clipped to start there. An fp8
// cache is read as codes converted in registers, with k_scale folded into the score scale and
// v_scale into the output.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

constexpr int kP = kDecodePartitionKeys;

// exp2(m_old - m_new) with m in log2 units; 0 for a state that saw no key (m_old = -inf).
__device__ __forceinline__ float rescale_factor2(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
}

// Partitions a sequence uses: the kP-aligned ones from first / kP (its first key) to
// the one holding its last key; 1 for ctx <= kP (and for ctx = 0).
__device__ __forceinline__ int seq_partitions(int ctx, int first) {
  const int p0 = first / kP;
  return ctx <= (p0 + 1) * kP ? 1 : (ctx + kP - 1) / kP - p0;
}

// E elements of one K or V row as a lane loads them: 8 (KvElem's 16 bytes of bf16 or 8 of fp8)
// or, for an fp8 cache, 16 (16 bytes).
template <typename C, int E>
struct KvChunk : KvElem<C> {
  static_assert(E == 8);
};
template <>
struct KvChunk<uint8_t, 16> {
  using Raw = uint4;
  __device__ __forceinline__ static Raw load(const uint8_t* p) {
    return *reinterpret_cast<const uint4*>(p);
  }
  __device__ __forceinline__ static Raw zero() { return make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ static void unpack(Raw r, float* f) {
    unpack8_fp8(make_uint2(r.x, r.y), f);
    unpack8_fp8(make_uint2(r.z, r.w), f + 8);
  }
};

// Elements a lane takes of each row. An fp8 row read 8 bytes a lane spent as many instructions
// per key (the group's shuffle sums, the softmax) as a bf16 row of twice the bytes, and ran at
// half the copy bandwidth, bound by those instructions; 16 halves them per byte. Small GQA
// groups only: the lane's q and accumulators grow with E x GT registers.
template <typename C, int GT>
constexpr int lane_elems() {
  return sizeof(C) == 1 && GT <= 2 ? 16 : 8;
}

// out[b, h][dim] = sum_p w_p o_p / sum_p w_p,  w_p = l_p exp(m_p - max m), over the np partitions
// of slot base.. (partials [slot][d], ml [slot][2] = (m in log2 units, l)). Loads through L2
// (__ldcg): other CTAs wrote them in this launch, and this SM's L1 may hold a stale line of ml.
__device__ __forceinline__ float merge_partitions(const float* partials, const float* ml,
                                                  int64_t base, int np, int d, int dim) {
  float M = -INFINITY;
  for (int p = 0; p < np; ++p) M = fmaxf(M, __ldcg(ml + 2 * (base + p)));
  float W = 0.0f, A = 0.0f;
  for (int p = 0; p < np; ++p) {
    const float w =
        rescale_factor2(__ldcg(ml + 2 * (base + p)), M) * __ldcg(ml + 2 * (base + p) + 1);
    W += w;
    A += w * __ldcg(partials + (base + p) * d + dim);
  }
  return W > 0.0f ? A / W : 0.0f;
}

// scale: the score scale times k_scale; out_scale: v_scale (1 for a bf16 cache). At GQA <= 2, 4
// CTAs an SM (at most 128 registers): the merge's code took a bf16 kernel at GQA 2 from 128 to
// 137 (3 CTAs) unbounded; bounded, ptxas -v (sm_90a) shows 120 and no spill.
template <int D, int GT, typename C>
__global__ void __launch_bounds__(kDecodeThreads, GT <= 2 ? 4 : 1)
    decode_partition_kernel(uint16_t* out, Rows q, int32_t hq, PagedKV kv,
                            const int32_t* context_lens, int num_partitions, float scale,
                            float out_scale, float* partials, int32_t* counters) {
  constexpr int E = lane_elems<C, GT>();           // elements of a row per lane
  using Elem = KvChunk<C, E>;
  constexpr int LPK = D / E;                       // lanes per key
  constexpr int KPW = 32 / LPK;                    // keys per warp step
  constexpr int NG = (kDecodeThreads / 32) * KPW;  // key groups per CTA
  // Keys in flight per group: 16-byte loads, 4 keys at GQA <= 2 and 2 past it; ptxas -v (sm_90a)
  // shows no spill for these.
  constexpr int U = GT <= 2 ? 4 : 2;
  __shared__ float sm_m[NG][GT];
  __shared__ float sm_l[NG][GT];
  __shared__ float sm_acc[NG][GT][D];
  __shared__ bool sm_merge;  // this CTA completed the sequence's last partition

  const int kvh = blockIdx.y, b = blockIdx.z;
  const int G = hq / kv.hkv;
  const int ctx = context_lens[b];
  const int first = window_first_key(ctx - 1, kv.sliding_window);
  const int seq_parts = seq_partitions(ctx, first);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // A CTA takes partitions blockIdx.x, + gridDim.x, ...: the grid is sized to the machine, the
  // partitions (and so the result) only to the sequence.
  for (int part = blockIdx.x; part < seq_parts; part += gridDim.x) {
    const int part_start = (first / kP + part) * kP;  // part indexes the sequence's partitions
    const int start = max(first, part_start);
    const int end = min(ctx, part_start + kP);
    const int sub = lane % LPK, grp = warp * KPW + lane / LPK;

    // Scores are kept in log2 units (q pre-scaled by log2 e), so each exponential is one exp2.
    float qv[GT][E];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      if (g < G) {
        const uint16_t* qp = static_cast<const uint16_t*>(q.data) + int64_t(b) * q.stride0 +
                             int64_t(kvh * G + g) * q.stride1 + sub * E;
#pragma unroll
        for (int e = 0; e < E; e += 8) load8(qp + e, qv[g] + e);
#pragma unroll
        for (int e = 0; e < E; ++e) qv[g][e] *= scale * kLog2e;
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) qv[g][e] = 0.0f;
      }
    }
    float m[GT], l[GT], acc[GT][E];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      m[g] = -INFINITY;
      l[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
    }

    const int32_t* table = kv.block_tables + int64_t(b) * kv.table_stride;
    const int64_t row = int64_t(kv.hkv) * D;
    const int64_t head_off = int64_t(kvh) * D + sub * E;
    const C* k_cache = static_cast<const C*>(kv.k);
    const C* v_cache = static_cast<const C*>(kv.v);
    // A partition inside one cache block (every partition when the block size is a multiple of
    // kP, the default) reads its table entry once; otherwise each key looks up its block.
    const bool one_block = start / kv.block_size == (end - 1) / kv.block_size;
    const int64_t first_slot = key_slot(table, start, kv.block_size) - start;
    // The loop bound is uniform per warp (its first key), so the shuffles below see all lanes.
    for (int base = start + warp * KPW; base < end; base += NG * U) {
      typename Elem::Raw kr[U], vr[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = base + lane / LPK + u * NG;
        if (j < end) {
          const int64_t slot = one_block ? first_slot + j : key_slot(table, j, kv.block_size);
          const int64_t off = slot * row + head_off;
          kr[u] = Elem::load(k_cache + off);
          vr[u] = Elem::load(v_cache + off);
        } else {
          kr[u] = Elem::zero();
          vr[u] = Elem::zero();
        }
      }
      // The chunk's U scores per head, then one softmax rescale for the whole chunk.
      float s[GT][U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[E];
        Elem::unpack(kr[u], kf);
#pragma unroll
        for (int g = 0; g < GT; ++g) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < E; ++e) d += qv[g][e] * kf[e];
          s[g][u] = d;
        }
      }
#pragma unroll
      for (int g = 0; g < GT; ++g)
#pragma unroll
        for (int u = 0; u < U; ++u) s[g][u] = group_sum<LPK>(s[g][u]);
      bool valid[U];
#pragma unroll
      for (int u = 0; u < U; ++u) valid[u] = base + lane / LPK + u * NG < end;
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        float chunk_max = -INFINITY;
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (valid[u]) chunk_max = fmaxf(chunk_max, s[g][u]);
        if (g >= G) continue;
        if (chunk_max == -INFINITY) {  // every key of this lane group lies past the end
#pragma unroll
          for (int u = 0; u < U; ++u) s[g][u] = 0.0f;
          continue;
        }
        const float m_new = fmaxf(m[g], chunk_max);
        const float c = exp2f(m[g] - m_new);  // 0 while m is -inf
        l[g] *= c;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= c;
        m[g] = m_new;
#pragma unroll
        for (int u = 0; u < U; ++u) s[g][u] = valid[u] ? exp2f(s[g][u] - m_new) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float vf[E];
        Elem::unpack(vr[u], vf);
#pragma unroll
        for (int g = 0; g < GT; ++g) {
          if (g >= G) continue;
          const float p = s[g][u];
          l[g] += p;
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] += p * vf[e];
        }
      }
    }

#pragma unroll
    for (int g = 0; g < GT; ++g) {
#pragma unroll
      for (int e = 0; e < E; ++e) sm_acc[grp][g][sub * E + e] = acc[g][e];
      if (sub == 0) {
        sm_m[grp][g] = m[g];
        sm_l[grp][g] = l[g];
      }
    }
    __syncthreads();
    const bool single = seq_parts == 1;
    for (int idx = threadIdx.x; idx < G * D; idx += kDecodeThreads) {
      const int g = idx / D, dim = idx % D;
      float M = -INFINITY;
      for (int i = 0; i < NG; ++i) M = fmaxf(M, sm_m[i][g]);
      float L = 0.0f, A = 0.0f;
      for (int i = 0; i < NG; ++i) {
        const float w = rescale_factor2(sm_m[i][g], M);
        L += w * sm_l[i][g];
        A += w * sm_acc[i][g][dim];
      }
      const int h = kvh * G + g;
      const float o = L > 0.0f ? A / L * out_scale : 0.0f;
      if (single) {
        st_bf16(out + (int64_t(b) * hq + h) * D + dim, o);
      } else {
        const int64_t slot = (int64_t(b) * hq + h) * num_partitions + part;
        partials[slot * D + dim] = o;
        if (dim == 0) {  // (m in log2 units, l): merge_partitions
          float* ml = partials + int64_t(gridDim.z) * hq * num_partitions * D;
          ml[2 * slot] = M;
          ml[2 * slot + 1] = L;
        }
      }
    }
    if (!single) {
      // This partition's (o, m, l) are out; the CTA that counts the sequence's last one merges.
      __threadfence();  // each thread's writes before the count (the merging CTA reads them)
      __syncthreads();
      if (threadIdx.x == 0) {
        int32_t* count = counters + int64_t(b) * kv.hkv + kvh;
        sm_merge = atomicAdd(count, 1) == seq_parts - 1;
        if (sm_merge) *count = 0;  // every partition has counted: zero for the next launch
      }
      __syncthreads();
      if (sm_merge) {
        __threadfence();
        const float* ml = partials + int64_t(gridDim.z) * hq * num_partitions * D;
        for (int idx = threadIdx.x; idx < G * D; idx += kDecodeThreads) {
          const int h = kvh * G + idx / D, dim = idx % D;
          const int64_t base = (int64_t(b) * hq + h) * num_partitions;
          st_bf16(out + (int64_t(b) * hq + h) * D + dim,
                  merge_partitions(partials, ml, base, seq_parts, D, dim));
        }
      }
    }
    __syncthreads();  // shared memory is reused by the next partition
  }
}

template <int D, typename C>
void launch_d(uint16_t* out, Rows q, int32_t hq, PagedKV kv, const int32_t* context_lens,
              int32_t num_seqs, int num_partitions, int grid_partitions, float scale,
              float* partials, int32_t* counters, cudaStream_t stream) {
  const dim3 grid(unsigned(grid_partitions), unsigned(kv.hkv), unsigned(num_seqs));
  const float qk_scale = scale * kv.k_scale, out_scale = kv.v_scale;
  const auto run = [&](auto gt) {
    decode_partition_kernel<D, decltype(gt)::value, C><<<grid, kDecodeThreads, 0, stream>>>(
        out, q, hq, kv, context_lens, num_partitions, qk_scale, out_scale, partials, counters);
  };
  switch (decode_group_tile(hq / kv.hkv)) {
    case 1:
      run(std::integral_constant<int, 1>{});
      break;
    case 2:
      run(std::integral_constant<int, 2>{});
      break;
    case 4:
      run(std::integral_constant<int, 4>{});
      break;
    default:
      run(std::integral_constant<int, 8>{});
      break;
  }
  NV_CUDA_CHECK("attention_decode", cudaGetLastError());
}

}  // namespace

int64_t decode_partials_floats(int64_t num_seqs, int64_t hq, int64_t d, int num_partitions) {
  return num_partitions <= 1 ? 0 : num_seqs * hq * num_partitions * (d + 2);
}

void launch_attention_decode(uint16_t* out, Rows q, int32_t hq, PagedKV kv,
                             const int32_t* context_lens, int32_t num_seqs, int num_partitions,
                             int grid_partitions, float scale, float* partials, int32_t* counters,
                             cudaStream_t stream) {
  if (num_seqs == 0) return;
  const auto run = [&](auto d) {
    if (kv.fp8) {
      launch_d<decltype(d)::value, uint8_t>(out, q, hq, kv, context_lens, num_seqs, num_partitions,
                                            grid_partitions, scale, partials, counters, stream);
    } else {
      launch_d<decltype(d)::value, uint16_t>(out, q, hq, kv, context_lens, num_seqs, num_partitions,
                                             grid_partitions, scale, partials, counters, stream);
    }
  };
  with_head_dim<256>(kv.d, run);
}

}  // namespace nanovllm::cuda
