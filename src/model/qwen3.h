#pragma once
// The dense decoder of Qwen3, Qwen2, Llama and Mistral, written once against the Backend
// interface (named after nano-vllm's qwen3.py). Qwen3: per-head RMSNorm of q and k before RoPE.
// Qwen2: q/k/v biases, no q/k norm. Llama / Mistral: neither (biases where attention_bias says),
// Mistral's sliding window (per layer, in LayerKVCache). Every family: RoPE frequencies scaled
// as rope_scaling says (linear, llama3, yarn; yarn's attention factor folded into the cos / sin
// table). Qwen3-MoE / Mixtral: the same layers, with sparse MoE blocks
// (router + fused_moe) where config.is_sparse_layer says.
#include <vector>

#include "backend/backend.h"
#include "runtime/forward_batch.h"
#include "model/hf_config.h"
#include "model/mixed_batch.h"
#include "model/weights.h"

namespace nanovllm {

class Qwen3Model {
 public:
  // max_position: RoPE table length (max_model_len).
  Qwen3Model(const ModelConfig& config, ModelWeights weights, Backend& backend, int max_position);

  // Allocates the activation workspace once, for steps of up to max_tokens tokens and max_seqs
  // sequences; every later forward() uses the same addresses (a CUDA graph replays over them).
  void reserve(int max_tokens, int max_seqs);
  size_t workspace_bytes() const { return workspace_.bytes() + mixed_.bytes(); }

  // Runs one step and returns the logits of each sequence's last token: f32 [num_seqs, V]
  // (a view into the model's workspace, valid until the next call). kv_cache: one per layer.
  // The batch must fit what reserve() allocated. A mixed step (is_prefill, num_decode_seqs > 0)
  // runs attention_decode on its decode rows and attention_prefill on the rest (MixedBatch).
  Tensor forward(const ForwardBatch& batch, const std::vector<LayerKVCache>& kv_cache);

  // Logits f32 [n, V] of rows `rows[0..n)` (indices into the last forward's tokens; n at most
  // kMaxLogitRows) of that forward's final hidden states: prompt logprobs score every prompt
  // token, not only the last. A view into the workspace, valid until the next call.
  static constexpr int kMaxLogitRows = 16;
  Tensor row_logits(const int32_t* rows, int n);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

 private:
  void attention(int layer, const ForwardBatch& batch, const LayerKVCache& cache, Tensor hidden);
  void mlp(int layer, Tensor hidden);

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  Buffer cos_sin_buf_;
  Tensor cos_sin_;          // f32 [max_position, D]
  int capacity_tokens_ = 0;
  int capacity_seqs_ = 0;
  Buffer workspace_;
  Tensor hidden_;           // act [T, H]
  Tensor residual_;         // act [T, H]
  Tensor qkv_;              // act [T, (Hq + 2 Hkv) D]
  Tensor attn_out_;         // act [T, Hq D]
  Tensor gate_up_;          // act [T, 2 I]
  Tensor mlp_act_;          // act [T, I]
  Tensor last_hidden_;      // act [B, H]
  Tensor logits_;           // f32 [B, V]
  Tensor row_ids_;          // i32 [R] (R = kMaxLogitRows): row_logits' rows
  Tensor row_hidden_;       // act [R, H]
  Tensor row_logits_;       // f32 [R, V]
  Tensor router_logits_;    // f32 [T, E] (MoE models only)
  Tensor moe_out_;          // act [T, H] (MoE models only): fused_moe's output
  MixedBatch mixed_;        // a mixed step's attention sub-batches
};

}  // namespace nanovllm
