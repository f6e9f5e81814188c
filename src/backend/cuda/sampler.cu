// The sampler on the device: one CTA per sequence over its whole vocabulary row, with the shared
// functions of runtime/sampling_rng.h (clean_logit, scaled_logit, sample_uniform, race_score),
// so the token is the one the CPU and the reference pick for the same logits and seed.
// Greedy (temperature 0): argmax, lowest index on ties. Otherwise the exponential race over
// every token. min_p / top-k / top-p and logit processing are left to the host (CudaBackend).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "runtime/sampling_rng.h"

namespace nanovllm::cuda {

namespace {

constexpr int kSampleThreads = 1024;

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
  Best r{-INFINITY, 0x7fffffff};
  for (int w = 0; w < int(blockDim.x / 32); ++w) r = better(r, warp_best[w]);
  return r;
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(int32_t* out, const float* logits, int64_t stride, int64_t vocab,
                  const float* temperatures, const int64_t* seeds, const int64_t* offsets) {
  const int64_t b = blockIdx.x;
  const float* x = logits + b * stride;
  const float temperature = temperatures[b];
  Best best{-INFINITY, 0x7fffffff};
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    best = better(best, {clean_logit(x[i]), int32_t(i)});
  best = block_best(best);
  if (temperature == 0.0f || best.v == -INFINITY) {  // greedy; or every logit -inf / NaN: token 0
    if (threadIdx.x == 0) out[b] = best.v == -INFINITY ? 0 : best.i;
    return;
  }
  const float m = best.v;
  const uint64_t seed = uint64_t(seeds[b]);
  const int64_t offset = offsets[b];
  Best race{-INFINITY, 0x7fffffff};
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float d = scaled_logit(clean_logit(x[i]), m, temperature);
    race = better(race, {race_score(d, sample_uniform(seed, offset, i)), int32_t(i)});
  }
  race = block_best(race);
  if (threadIdx.x == 0) out[b] = race.i == 0x7fffffff ? 0 : race.i;
}

}  // namespace

void launch_sample(int32_t* out, const float* logits, int64_t logits_stride, int64_t num_seqs,
                   int64_t vocab, const float* temperatures, const int64_t* seeds,
                   const int64_t* offsets, cudaStream_t stream) {
  if (num_seqs == 0) return;
  sample_kernel<<<unsigned(num_seqs), kSampleThreads, 0, stream>>>(
      out, logits, logits_stride, vocab, temperatures, seeds, offsets);
  NV_CUDA_CHECK("sample", cudaGetLastError());
}

}  // namespace nanovllm::cuda
