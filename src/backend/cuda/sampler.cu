// The sampler on the device: one CTA per sequence over its whole vocabulary row, with the shared
// functions of runtime/sampling_rng.h (clean_logit, scaled_logit, sample_uniform, race_score),
// so the token is the one the CPU and the reference pick for the same logits and seed.
//   - greedy (temperature 0): argmax, lowest index on ties;
//   - neither top-k nor top-p: the exponential race over every token that can win it (a token
//     whose d is more than kMaxRaceNoise (sampling_rng.h) below the argmax's race score cannot);
//   - top-k (k <= kMaxDeviceTopK) and / or top-p: the kept set is found by a radix select over
//     one 64-bit key per token, (order bits of d) << 32 | ~index, larger = better (d descending,
//     then index ascending: the rule's order, every key distinct). Passes of 11 bits from the
//     top narrow the prefix the k-th key shares until its bucket holds exactly the tokens still
//     needed (usually 2-3 passes over the row). The kept keys are compacted in index order,
//     bitonic-sorted in shared memory, then top-p cuts them by one thread's running double sum
//     and the race runs over what is left.
//   - top-p alone keeps the best kMaxDeviceTopK tokens as candidates; a nucleus larger than
//     that (a nearly flat distribution) is marked -1 for the host sampler (CudaBackend::sample).
// z, the denominator of top-p, is summed in ascending index order as the rule says, sequentially
// when top-k keeps the set; over a whole vocabulary larger than kMaxDeviceTopK it is the sum of
// per-thread chunks (each in index order) in chunk order, which may differ from the CPU's
// single running sum in the last bits, as the device's exp and log may.
// min_p and logit processing are left to the host (CudaBackend).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "runtime/sampling_rng.h"

namespace nanovllm::cuda {

namespace {

constexpr int kSampleThreads = 1024;
static_assert(kMaxDeviceTopK == kSampleThreads, "one kept token per thread");
constexpr int kRadixBits = 11;
constexpr int kRadixBins = 1 << kRadixBits;
static_assert(kRadixBins == 2 * kSampleThreads, "two bins per thread in the scan");
constexpr int32_t kNoIndex = 0x7fffffff;

struct Best {
  float v;
  int32_t i;
};

// Higher value, then lower index.
__device__ __forceinline__ Best better(Best a, Best b) {
  return (a.v > b.v || (a.v == b.v && a.i < b.i)) ? a : b;
}

__device__ Best block_best(Best x) {
  __shared__ Best warp_best[kSampleThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best y{__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)};
    x = better(x, y);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // warp_best may still be read by a previous call
  if (lane == 0) warp_best[warp] = x;
  __syncthreads();
  Best r{-INFINITY, kNoIndex};
  for (int w = 0; w < int(blockDim.x / 32); ++w) r = better(r, warp_best[w]);
  return r;
}

// f(i, x[i]) for every i < n, i taken by this thread (which i a thread sees is free: the callers
// reduce with `better`, whose result is the same in any order). A 16-byte-aligned row is read
// as float4, kLogitLoads of them in flight per thread: one CTA streams a 600 KB row, and with
// one float per thread in flight it waited on the latency instead (a few GB/s per SM).
constexpr int kLogitLoads = 4;
template <typename F>
__device__ __forceinline__ void for_each_logit(const float* x, int64_t n, F&& f) {
  const int64_t t = threadIdx.x, nt = blockDim.x;
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(x) & 15u) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    int64_t j = t;
    for (; j + (kLogitLoads - 1) * nt < n4; j += kLogitLoads * nt) {
      float4 v[kLogitLoads];
#pragma unroll
      for (int u = 0; u < kLogitLoads; ++u) v[u] = __ldg(x4 + j + u * nt);
#pragma unroll
      for (int u = 0; u < kLogitLoads; ++u) {
        const int64_t i = 4 * (j + u * nt);
        f(i, v[u].x);
        f(i + 1, v[u].y);
        f(i + 2, v[u].z);
        f(i + 3, v[u].w);
      }
    }
    for (; j < n4; j += nt) {
      const float4 v = __ldg(x4 + j);
      f(4 * j, v.x);
      f(4 * j + 1, v.y);
      f(4 * j + 2, v.z);
      f(4 * j + 3, v.w);
    }
    done = 4 * n4;
  }
  for (int64_t i = done + t; i < n; i += nt) f(i, x[i]);
}

// Inclusive prefix sum of v over the block's threads in threadIdx order.
__device__ int block_inclusive_scan(int v) {
  __shared__ int warp_sums[kSampleThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_sync(0xffffffffu, v, lane >= o ? lane - o : lane);
    if (lane >= o) v += y;
  }
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  for (int w = 0; w < warp; ++w) v += warp_sums[w];
  return v;
}

// d's place in the order of floats as an unsigned (no NaN; -0 is made +0 by the caller).
__device__ __forceinline__ uint32_t order_bits(float d) {
  const uint32_t u = __float_as_uint(d);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_order_bits(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}
__device__ __forceinline__ uint64_t rank_key(float d, int64_t i) {
  return (uint64_t(order_bits(d)) << 32) | uint64_t(0xffffffffu - uint32_t(i));
}
__device__ __forceinline__ int32_t key_index(uint64_t key) {
  return int32_t(0xffffffffu - uint32_t(key & 0xffffffffu));
}
__device__ __forceinline__ float key_d(uint64_t key) { return from_order_bits(uint32_t(key >> 32)); }

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(int32_t* out, const float* logits, int64_t stride, int64_t vocab,
                  const float* temperatures, const int32_t* top_ks, const float* top_ps,
                  const int64_t* seeds, const int64_t* offsets) {
  __shared__ int hist[kRadixBins];
  __shared__ uint64_t kept[kMaxDeviceTopK];  // keys of the kept tokens
  __shared__ double mass[kMaxDeviceTopK];    // exp(double(d)) of kept[j], or chunk sums
  __shared__ int sel_digit, sel_above, sel_cut;
  __shared__ double sel_z;

  const int64_t b = blockIdx.x;
  const int t = int(threadIdx.x);
  const float* x = logits + b * stride;
  const float temperature = temperatures[b];
  Best best{-INFINITY, kNoIndex};
  for_each_logit(x, vocab, [&](int64_t i, float v) {
    best = better(best, {clean_logit(v), int32_t(i)});
  });
  best = block_best(best);
  if (temperature == 0.0f || best.v == -INFINITY) {  // greedy; or every logit -inf / NaN: token 0
    if (t == 0) out[b] = best.v == -INFINITY ? 0 : best.i;
    return;
  }
  const float m = best.v;
  const uint64_t seed = uint64_t(seeds[b]);
  const int64_t offset = offsets[b];
  auto d_of_logit = [&](float y) {
    const float d = scaled_logit(clean_logit(y), m, temperature);
    return d == 0.0f ? 0.0f : d;  // -0 (y = -0, m = +0) ties with +0, as in the CPU's compares
  };
  auto d_of = [&](int64_t i) { return d_of_logit(x[i]); };
  const int32_t top_k = top_ks[b];
  const float top_p = top_ps[b];
  const bool use_top_k = top_k > 0 && top_k < vocab;
  const bool use_top_p = top_p < 1.0f;
  if (use_top_k && top_k > kMaxDeviceTopK) {  // CudaBackend sends these to the host; never here
    if (t == 0) out[b] = -1;
    return;
  }

  if (!use_top_k && !use_top_p) {
    // The winner scores at least what the argmax (d = 0) scores, and no token scores above
    // d + kMaxRaceNoise: a token with d below race_floor = (the argmax's score) - kMaxRaceNoise
    // cannot win or tie, so its hash and logarithms are skipped (most of a trained model's
    // vocabulary). Nor can a token whose u is below race_u_floor(beat), beat the best score this
    // thread has seen (sampling_rng.h), so its logarithms are skipped: after a few tokens that is
    // nearly every token, however flat the logits (a random model's are). Same token as before.
    float beat = race_score(0.0f, sample_uniform(seed, offset, best.i));
    const float race_floor = beat - kMaxRaceNoise;
    float u_floor = race_u_floor(beat);
    Best race{-INFINITY, kNoIndex};
    for_each_logit(x, vocab, [&](int64_t i, float v) {
      const float d = d_of_logit(v);
      if (d < race_floor) return;
      const float u = sample_uniform(seed, offset, i);
      if (u < u_floor) return;
      const float r = race_score(d, u);
      race = better(race, {r, int32_t(i)});
      if (r > beat) {
        beat = r;
        u_floor = race_u_floor(beat);
      }
    });
    race = block_best(race);
    if (t == 0) out[b] = race.i == kNoIndex ? 0 : race.i;
    return;
  }

  // 1. Radix select: the keys of the kept set are those whose bits under `mask` are >= prefix.
  const int k = use_top_k ? int(top_k) : int(vocab < kMaxDeviceTopK ? vocab : kMaxDeviceTopK);
  uint64_t prefix = 0, mask = 0;
  int need = k;  // kept tokens not yet above the prefix
  for (int pass = 0;; ++pass) {
    const int shift = 64 - kRadixBits * (pass + 1) > 0 ? 64 - kRadixBits * (pass + 1) : 0;
    const uint64_t digit_mask = (uint64_t(1) << (64 - kRadixBits * pass - shift)) - 1;
    for (int j = t; j < kRadixBins; j += blockDim.x) hist[j] = 0;
    __syncthreads();
    for (int64_t i = t; i < vocab; i += blockDim.x) {
      const uint64_t key = rank_key(d_of(i), i);
      if ((key & mask) == prefix) atomicAdd(&hist[int((key >> shift) & digit_mask)], 1);
    }
    __syncthreads();
    // Thread t holds bins hi and hi - 1, counted from the top bin down.
    const int hi = kRadixBins - 1 - 2 * t;
    const int c_hi = hist[hi], c_lo = hist[hi - 1];
    const int incl = block_inclusive_scan(c_hi + c_lo);
    const int above = incl - c_hi - c_lo;  // tokens in the bins above hi
    if (above < need && need <= above + c_hi) {
      sel_digit = hi;
      sel_above = above;
    } else if (above + c_hi < need && need <= incl) {
      sel_digit = hi - 1;
      sel_above = above + c_hi;
    }
    __syncthreads();
    const int digit = sel_digit;
    need -= sel_above;
    prefix |= uint64_t(digit) << shift;
    mask |= digit_mask << shift;
    const bool done = hist[digit] == need || shift == 0;  // the bucket holds just the rest
    __syncthreads();  // hist and sel_* are rewritten by the next pass
    if (done) break;
  }

  // 2. The kept keys in ascending index order: thread t compacts its chunk of the row.
  const int64_t chunk = (vocab + blockDim.x - 1) / blockDim.x;
  const int64_t begin = t * chunk, end = begin + chunk < vocab ? begin + chunk : vocab;
  int mine = 0;
  for (int64_t i = begin; i < end; ++i) mine += (rank_key(d_of(i), i) & mask) >= prefix;
  int pos = block_inclusive_scan(mine) - mine;
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t key = rank_key(d_of(i), i);
    if ((key & mask) >= prefix) kept[pos++] = key;
  }
  __syncthreads();

  // 3. z of top-p: over the kept set (top-k) or the whole vocabulary, in ascending index order.
  if (use_top_p) {
    if (use_top_k) {
      if (t < k) mass[t] = exp(double(key_d(kept[t])));
    } else {
      double part = 0.0;
      for (int64_t i = begin; i < end; ++i) part += exp(double(d_of(i)));
      mass[t] = part;
    }
    __syncthreads();
    if (t == 0) {
      double z = 0.0;
      const int n = use_top_k ? k : int(blockDim.x);
      for (int j = 0; j < n; ++j) z += mass[j];
      sel_z = z;
    }
    __syncthreads();
  }

  // 4. Sort the kept keys, best first (bitonic over the next power of 2, padded with key 0).
  int n2 = 1;
  while (n2 < k) n2 <<= 1;
  if (t >= k && t < n2) kept[t] = 0;
  __syncthreads();
  for (int size = 2; size <= n2; size <<= 1) {
    for (int half = size / 2; half > 0; half >>= 1) {
      const int j = t ^ half;
      if (t < n2 && j > t) {
        const uint64_t a = kept[t], c = kept[j];
        if ((t & size) == 0 ? a < c : a > c) {
          kept[t] = c;
          kept[j] = a;
        }
      }
      __syncthreads();
    }
  }

  // 5. top-p: the shortest prefix whose running sum reaches top_p * z.
  int cut = k;
  if (use_top_p) {
    if (t < k) mass[t] = exp(double(key_d(kept[t])));
    __syncthreads();
    if (t == 0) {
      const double target = double(top_p) * sel_z;
      double cum = 0.0;
      int c = -1;
      for (int j = 0; j < k; ++j) {
        cum += mass[j];
        if (cum >= target) {
          c = j + 1;
          break;
        }
      }
      sel_cut = c;
    }
    __syncthreads();
    cut = sel_cut;
    if (cut < 0) {
      if (use_top_k || k == vocab) {
        cut = k;  // not reaching top_p * z (rounding): every kept token stays
      } else {
        if (t == 0) out[b] = -1;  // the nucleus is wider than the candidates: the host samples
        return;
      }
    }
  }

  // 6. The race over the kept tokens.
  Best race{-INFINITY, kNoIndex};
  if (t < cut) {
    const int32_t i = key_index(kept[t]);
    race = {race_score(key_d(kept[t]), sample_uniform(seed, offset, i)), i};
  }
  race = block_best(race);
  if (t == 0) out[b] = race.i == kNoIndex ? 0 : race.i;
}

// Structured outputs: logits[b, t] = -inf where row b is masked (has[b] != 0) and bit t % 32
// of bitmask[b, t / 32] is clear. Grid (ceil(vocab / 256), num_seqs), a thread per token.
__global__ void apply_token_bitmask_kernel(float* logits, int64_t stride, int64_t vocab,
                                           const uint32_t* bitmask, int32_t words,
                                           const uint32_t* has) {
  const int64_t b = blockIdx.y;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (has[b] == 0 || t >= vocab) return;
  if (((bitmask[b * words + t / 32] >> (t % 32)) & 1u) == 0) logits[b * stride + t] = -INFINITY;
}

}  // namespace

void launch_apply_token_bitmask(float* logits, int64_t logits_stride, int64_t num_seqs,
                                int64_t vocab, const uint32_t* bitmask, int32_t words,
                                const uint32_t* has_bitmask, cudaStream_t stream) {
  if (num_seqs == 0 || vocab == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(unsigned((vocab + kThreads - 1) / kThreads), unsigned(num_seqs));
  apply_token_bitmask_kernel<<<grid, kThreads, 0, stream>>>(logits, logits_stride, vocab, bitmask,
                                                            words, has_bitmask);
  NV_CUDA_CHECK("apply_token_bitmask", cudaGetLastError());
}

void launch_sample(int32_t* out, const float* logits, int64_t logits_stride, int64_t num_seqs,
                   int64_t vocab, const float* temperatures, const int32_t* top_k,
                   const float* top_p, const int64_t* seeds, const int64_t* offsets,
                   cudaStream_t stream) {
  if (num_seqs == 0) return;
  sample_kernel<<<unsigned(num_seqs), kSampleThreads, 0, stream>>>(
      out, logits, logits_stride, vocab, temperatures, top_k, top_p, seeds, offsets);
  NV_CUDA_CHECK("sample", cudaGetLastError());
}

}  // namespace nanovllm::cuda
