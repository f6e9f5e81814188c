#pragma once
// The router of a sparse MoE block (transformers' Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock):
// softmax over the experts' logits in f32, the top k, optionally renormalized. Every backend's
// fused_moe routes by this rule.
#include <cstdint>

namespace nanovllm {

// One token: p = softmax(logits[0..E)); ids[0..k) = the k experts of the largest logits in
// descending order (ties: the lower index first; the same order as by p, without the ties that
// rounding of exp would add); weights[j] = p[ids[j]], divided by the sum of the k when
// renormalize. Preconditions: 1 <= k <= E, logits finite.
void moe_route(const float* logits, int num_experts, int top_k, bool renormalize, int32_t* ids,
               float* weights);

}  // namespace nanovllm
