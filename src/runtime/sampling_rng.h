#pragma once
// The sampling rule every backend implements bit for bit in its choice of token (a counter-based
// RNG, so that CPU, CUDA and the reference pick the same token for the same seed):
//
//   temperature == 0: argmax(logits), lowest index on ties.
//   otherwise: l_i = logits_i / temperature;
//     top_k > 0 keeps the top_k largest l_i (ties: lower index first);
//     top_p < 1 then keeps the smallest prefix, by descending probability softmax(l) over the
//     kept set, whose probability sum reaches top_p;
//     token = argmax over kept i of  l_i - log(E_i),  E_i = -log(u_i),
//     u_i = sample_uniform(seed, offset, i)  (the exponential race: argmax p_i / E_i).
//   offset = the number of tokens in the sequence before the sampled one.
#include <cstdint>

#if defined(__CUDACC__)
#define NV_HOST_DEVICE __host__ __device__
#else
#define NV_HOST_DEVICE
#endif

namespace nanovllm {

NV_HOST_DEVICE inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), 23 random bits, never 0 or 1: (k + 0.5) / 2^23 is exact in f32 for every
// k < 2^23 (with 24 bits, k = 2^24 - 1 would round up to exactly 1).
NV_HOST_DEVICE inline float sample_uniform(uint64_t seed, int64_t offset, int64_t index) {
  uint64_t h = mix64(mix64(seed ^ mix64(uint64_t(offset))) ^ uint64_t(index));
  return (float(h >> 41) + 0.5f) * (1.0f / 8388608.0f);
}

}  // namespace nanovllm
