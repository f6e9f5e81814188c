// Prefill attention on the tensor cores (head dims 16 to 128; attention_prefill.cu keeps 256):
// the same work split as the CUDA-core kernel (varlen by cu_seqlens_q, paged cache with prefix
// keys, causal, GQA rows r -> token t0 + r / G, head kvh * G + r % G), FlashAttention-2's loop.
// A CTA takes kPrefillMmaRows rows, 16 per warp; per tile of kPrefillKeys keys in shared memory a
// warp computes its 16 x 64 scores with mma.m16n8k16 (Q fragments held in registers), scales and
// masks them in place, keeps each row's max and sum in log2 units (a row lives in one lane quad),
// turns the probabilities into A fragments without leaving registers (two bf16 terms each, so P
// keeps f32 precision) and accumulates P @ V into its 16 x D f32 output fragments, rescaled per
// row. An fp8 cache's codes become bf16
// (exactly) as a tile is loaded; k_scale is folded into the score scale and v_scale into the
// output. Under a sliding window the key tiles start at the one holding the first row's first
// key, and each row masks the keys below its own window.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/mma.cuh"

namespace nanovllm::cuda {

namespace {

constexpr int kRows = kPrefillMmaRows;
constexpr int kKeys = kPrefillKeys;
static_assert(kRows == 16 * (kPrefillThreads / 32), "16 rows per warp");
static_assert(kKeys % 16 == 0, "keys in blocks of 16");

template <int D>
struct MmaSmem {
  // Rows padded by 8 bf16: a lane quad's 32-bit fragment reads hit 32 different banks.
  static constexpr int kStride = D + 8;
  uint16_t q[kRows][kStride];
  uint16_t k[kKeys][kStride];
  uint16_t v[kKeys][kStride];
};

__device__ __forceinline__ uint32_t ld_u32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// scale: the score scale times k_scale; out_scale: v_scale (1 for a bf16 cache).
template <int D, typename C>
__global__ void __launch_bounds__(kPrefillThreads)
    prefill_mma_kernel(uint16_t* out, Rows q, int32_t hq, PagedKV kv, const int32_t* cu_seqlens_q,
                       const int32_t* context_lens, float scale, float out_scale) {
  using Elem = KvElem<C>;
  constexpr int KB = D / 16;     // k blocks of the scores
  constexpr int NT = D / 8;      // n tiles of the output
  constexpr int ST = kKeys / 8;  // n tiles of the scores
  extern __shared__ __align__(16) unsigned char smem_raw[];
  MmaSmem<D>& sm = *reinterpret_cast<MmaSmem<D>*>(smem_raw);

  const int tile = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int G = hq / kv.hkv;
  const int tpc = kRows / G;
  const int q_start = cu_seqlens_q[b];
  const int seqlen_q = cu_seqlens_q[b + 1] - q_start;
  const int ctx = context_lens[b];
  const int t0 = tile * tpc;
  if (t0 >= seqlen_q) return;
  const int t_last = min(t0 + tpc, seqlen_q) - 1;
  const int kmax = query_position(ctx, seqlen_q, t_last);  // last key any row needs
  // First key any row needs (row t0's window start; 0 without a window).
  const int kmin = window_first_key(query_position(ctx, seqlen_q, t0), kv.sliding_window);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;

  // Query position of CTA row r, -1 for a row past the tokens (or the G * tpc used rows).
  const auto row_position = [&](int r) {
    const int i = t0 + r / G;
    return r < tpc * G && i < seqlen_q ? query_position(ctx, seqlen_q, i) : -1;
  };
  for (int idx = threadIdx.x; idx < kRows * (D / 8); idx += kPrefillThreads) {
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row_position(r) >= 0) {
      const int i = t0 + r / G;
      val = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(q.data) +
                                            int64_t(q_start + i) * q.stride0 +
                                            int64_t(kvh * G + r % G) * q.stride1 + c);
    }
    *reinterpret_cast<uint4*>(&sm.q[r][c]) = val;
  }
  const int row0 = warp * 16 + g, row1 = row0 + 8;  // this lane's two rows
  const int qpos0 = row_position(row0), qpos1 = row_position(row1);
  // The keys of the two rows: [first0, qpos0] and [first1, qpos1].
  const int first0 = window_first_key(qpos0, kv.sliding_window);
  const int first1 = window_first_key(qpos1, kv.sliding_window);
  // The warp's last needed key: tiles past it are loaded (by every thread) but not computed.
  // Its rows' smallest position and largest window start: a tile of keys inside both needs no
  // mask (every tile but the diagonal and the window's edge; -1 rows mask every tile).
  int warp_last = max(qpos0, qpos1), warp_min_q = min(qpos0, qpos1);
  int warp_max_first = max(first0, first1);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    warp_last = max(warp_last, __shfl_xor_sync(0xffffffffu, warp_last, o));
    warp_min_q = min(warp_min_q, __shfl_xor_sync(0xffffffffu, warp_min_q, o));
    warp_max_first = max(warp_max_first, __shfl_xor_sync(0xffffffffu, warp_max_first, o));
  }
  __syncthreads();
  uint32_t qa[KB][4];
#pragma unroll
  for (int kb = 0; kb < KB; ++kb) {
    qa[kb][0] = ld_u32(&sm.q[row0][kb * 16 + 2 * t]);
    qa[kb][1] = ld_u32(&sm.q[row1][kb * 16 + 2 * t]);
    qa[kb][2] = ld_u32(&sm.q[row0][kb * 16 + 8 + 2 * t]);
    qa[kb][3] = ld_u32(&sm.q[row1][kb * 16 + 8 + 2 * t]);
  }

  float m0 = -INFINITY, m1 = -INFINITY;  // row maxima (log2 units)
  float l0 = 0.0f, l1 = 0.0f;            // this lane's share of the row sums
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  const float s2 = scale * kLog2e;

  const int32_t* table = kv.block_tables + int64_t(b) * kv.table_stride;
  const int64_t row = int64_t(kv.hkv) * D;
  const C* k_cache = static_cast<const C*>(kv.k);
  const C* v_cache = static_cast<const C*>(kv.v);
  for (int kt = kmin / kKeys * kKeys; kt <= kmax; kt += kKeys) {
    __syncthreads();  // the previous tile is consumed
    for (int idx = threadIdx.x; idx < kKeys * (D / 8); idx += kPrefillThreads) {
      const int kk = idx / (D / 8), c = (idx % (D / 8)) * 8;
      const int j = kt + kk;
      uint4 kr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
      if (j >= kmin && j <= kmax && j < ctx) {
        const int64_t off = key_slot(table, j, kv.block_size) * row + int64_t(kvh) * D + c;
        kr = kv_as_bf16x8(Elem::load(k_cache + off));
        vr = kv_as_bf16x8(Elem::load(v_cache + off));
      }
      *reinterpret_cast<uint4*>(&sm.k[kk][c]) = kr;
      *reinterpret_cast<uint4*>(&sm.v[kk][c]) = vr;
    }
    __syncthreads();
    if (kt > warp_last) continue;  // warp-uniform

    // S = Q K^T: B[k = dim][n = key] = K[key][dim], two consecutive dims of one key per u32.
    float s[ST][4];
#pragma unroll
    for (int n = 0; n < ST; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kb = 0; kb < KB; ++kb)
        mma_bf16_m16n8k16(s[n], qa[kb], ld_u32(&sm.k[n * 8 + g][kb * 16 + 2 * t]),
                          ld_u32(&sm.k[n * 8 + g][kb * 16 + 8 + 2 * t]));
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
    if (kt + kKeys - 1 > warp_min_q || kt < warp_max_first) {  // warp-uniform: a tile to mask
#pragma unroll
      for (int n = 0; n < ST; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = kt + n * 8 + 2 * t + (e & 1);
          const bool masked = e < 2 ? j > qpos0 || j < first0 : j > qpos1 || j < first1;
          s[n][e] = masked ? -INFINITY : s[n][e] * s2;
          if (e < 2)
            mx0 = fmaxf(mx0, s[n][e]);
          else
            mx1 = fmaxf(mx1, s[n][e]);
        }
    } else {
#pragma unroll
      for (int n = 0; n < ST; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[n][e] *= s2;
          if (e < 2)
            mx0 = fmaxf(mx0, s[n][e]);
          else
            mx1 = fmaxf(mx1, s[n][e]);
        }
    }
    // A row's 64 scores lie in its lane quad.
#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    // A row with no key yet keeps m = -inf and p = 0 (exp2 of -inf), never -inf - -inf.
    const float c0 = n0 == -INFINITY ? 1.0f : exp2f(m0 - n0);
    const float c1 = n1 == -INFINITY ? 1.0f : exp2f(m1 - n1);
    const float b0 = n0 == -INFINITY ? 0.0f : n0, b1 = n1 == -INFINITY ? 0.0f : n1;
    m0 = n0;
    m1 = n1;
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      o[n][0] *= c0;
      o[n][1] *= c0;
      o[n][2] *= c1;
      o[n][3] *= c1;
    }
#pragma unroll
    for (int n = 0; n < ST; ++n) {
      s[n][0] = exp2f(s[n][0] - b0);
      s[n][1] = exp2f(s[n][1] - b0);
      s[n][2] = exp2f(s[n][2] - b1);
      s[n][3] = exp2f(s[n][3] - b1);
      l0 += s[n][0] + s[n][1];
      l1 += s[n][2] + s[n][3];
    }
    // O += P V: P's A fragment for keys 16kb.. is score tiles 2kb and 2kb + 1 as they lie;
    // B[k = key][n = dim] = V[key][dim], two keys of one dim per u32. P goes in as two bf16
    // terms (p = hi + lo, lo the rounding error of hi), so the product keeps f32 probabilities
    // as the CUDA-core kernel does (one bf16 P was measurably coarser: a 4-token MoE prompt's
    // logits moved 9e-2 from the reference instead of 7e-3); each V fragment serves both.
#pragma unroll
    for (int kb = 0; kb < kKeys / 16; ++kb) {
      uint32_t hi[4], lo[4];
      split_bf16x2(s[2 * kb][0], s[2 * kb][1], hi[0], lo[0]);
      split_bf16x2(s[2 * kb][2], s[2 * kb][3], hi[1], lo[1]);
      split_bf16x2(s[2 * kb + 1][0], s[2 * kb + 1][1], hi[2], lo[2]);
      split_bf16x2(s[2 * kb + 1][2], s[2 * kb + 1][3], hi[3], lo[3]);
      const int k0 = kb * 16 + 2 * t;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int dim = n * 8 + g;
        const uint32_t v0 = uint32_t(sm.v[k0][dim]) | (uint32_t(sm.v[k0 + 1][dim]) << 16);
        const uint32_t v1 = uint32_t(sm.v[k0 + 8][dim]) | (uint32_t(sm.v[k0 + 9][dim]) << 16);
        mma_bf16_m16n8k16(o[n], hi, v0, v1);
        mma_bf16_m16n8k16(o[n], lo, v0, v1);
      }
    }
  }

#pragma unroll
  for (int o2 = 1; o2 < 4; o2 <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half == 0 ? row0 : row1;
    const float l = half == 0 ? l0 : l1;
    if ((half == 0 ? qpos0 : qpos1) < 0) continue;
    const int i = t0 + r / G;
    uint16_t* op = out + (int64_t(q_start + i) * hq + kvh * G + r % G) * D;
    const float inv = l > 0.0f ? out_scale / l : 0.0f;
#pragma unroll
    for (int n = 0; n < NT; ++n)
      *reinterpret_cast<uint32_t*>(op + n * 8 + 2 * t) =
          pack_bf16x2(o[n][2 * half] * inv, o[n][2 * half + 1] * inv);
  }
}

template <int D, typename C>
void launch_d(uint16_t* out, Rows q, int32_t hq, PagedKV kv, const int32_t* cu_seqlens_q,
              const int32_t* context_lens, int32_t num_seqs, int32_t max_seqlen_q, float scale,
              cudaStream_t stream) {
  const int smem = int(sizeof(MmaSmem<D>));
  NV_CUDA_CHECK("attention_prefill (mma)",
                cudaFuncSetAttribute(prefill_mma_kernel<D, C>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(unsigned(prefill_num_tiles(max_seqlen_q, hq / kv.hkv, kRows)), unsigned(kv.hkv),
                  unsigned(num_seqs));
  prefill_mma_kernel<D, C><<<grid, kPrefillThreads, smem, stream>>>(
      out, q, hq, kv, cu_seqlens_q, context_lens, scale * kv.k_scale, kv.v_scale);
  NV_CUDA_CHECK("attention_prefill (mma)", cudaGetLastError());
}

}  // namespace

void launch_attention_prefill_mma(uint16_t* out, Rows q, int32_t hq, PagedKV kv,
                                  const int32_t* cu_seqlens_q, const int32_t* context_lens,
                                  int32_t num_seqs, int32_t max_seqlen_q, float scale,
                                  cudaStream_t stream) {
  const auto run = [&](auto d) {
    if (kv.fp8) {
      launch_d<decltype(d)::value, uint8_t>(out, q, hq, kv, cu_seqlens_q, context_lens, num_seqs,
                                            max_seqlen_q, scale, stream);
    } else {
      launch_d<decltype(d)::value, uint16_t>(out, q, hq, kv, cu_seqlens_q, context_lens, num_seqs,
                                             max_seqlen_q, scale, stream);
    }
  };
  with_head_dim<128>(kv.d, run);
}

}  // namespace nanovllm::cuda
