#pragma once
// Model weights on a backend: read from the checkpoint, shape-checked against config.json,
// converted to bf16, q/k/v fused into one projection and gate/up into one (nano-vllm's packed
// modules), and handed to the backend in its GEMM layout. A tied lm_head shares the embedding.
#include <vector>

#include "backend/backend.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace nanovllm {

struct LayerWeights {
  LinearWeight qkv_proj;      // [(Hq + 2 Hkv) * D, H]: q rows, then k rows, then v rows
  Tensor qkv_bias;            // bf16 [(Hq + 2 Hkv) * D] (Qwen2), else data == nullptr
  LinearWeight o_proj;        // [H, Hq * D]
  LinearWeight gate_up_proj;  // [2 I, H]: gate rows, then up rows (dense layers)
  LinearWeight down_proj;     // [H, I] (dense layers)
  LinearWeight router;        // [E, H] bf16 (sparse layers: config.is_sparse_layer), else n == 0
  MoeWeights experts;         // E experts of I = moe_intermediate_size (sparse layers)
  Tensor input_layernorm;     // bf16 [H]
  Tensor post_attention_layernorm;  // bf16 [H]
  Tensor q_norm;              // bf16 [D] (Qwen3), else data == nullptr
  Tensor k_norm;              // bf16 [D] (Qwen3), else data == nullptr
};

struct ModelWeights {
  LinearWeight embed_tokens;  // [V, H]; also the lm_head when tied
  LinearWeight lm_head;       // [V, H] when untied (n == 0 when tied)
  // Tensor parallel (model/tp_shard.h): embed_tokens and lm_head hold only this rank's vocab rows
  // [vocab_start, vocab_start + V/tp); the model looks up with vocab_parallel_embedding and
  // all-reduces. false: the whole table (vocab_start 0).
  bool vocab_parallel = false;
  int64_t vocab_start = 0;
  Tensor norm;                // bf16 [H]
  std::vector<LayerWeights> layers;
  std::vector<Buffer> small;  // storage of the norms and biases

  const LinearWeight& output_projection() const { return lm_head.n ? lm_head : embed_tokens; }
};

// A sparse layer's router and experts: [E, H] router and per expert [2 I, H] gate_up and [H, I]
// down, as named by expert_tensor_names; the router is never quantized (llama.cpp keeps its
// ffn_gate_inp unquantized too), the experts as every other linear.
// Throws Error naming the file and tensor for a missing tensor or a shape that does not match
// the config. quant (Config::quantization): every linear and the embedding / lm_head are
// quantized at load (round to nearest, runtime/quant.h), the table by embedding_quantization.
// A checkpoint with a quantization_config (config.quantization_config) keeps its own codes for
// the decoder linears it stores quantized (model/quantized_checkpoint.h) and its embedding /
// lm_head as stored; quant must then be none (Error naming the method otherwise).
ModelWeights load_weights(const Checkpoint& checkpoint, const ModelConfig& config, Backend& backend,
                          QuantScheme quant = {});

// Checkpoint names of a sparse layer's router and of expert e's gate / up / down weights:
// Qwen3-MoE "model.layers.{i}.mlp.gate.weight", "...mlp.experts.{e}.gate_proj.weight" (up_proj,
// down_proj); Mixtral "model.layers.{i}.block_sparse_moe.gate.weight",
// "...block_sparse_moe.experts.{e}.w1.weight" (gate), w3 (up), w2 (down).
struct ExpertNames {
  std::string gate, up, down;
};
std::string router_tensor_name(const ModelConfig& config, int layer);
ExpertNames expert_tensor_names(const ModelConfig& config, int layer, int expert);

// The scheme of the embedding / lm_head table under `linear`, the decoder linears' scheme.
QuantScheme embedding_quantization(QuantScheme linear);

// A small bf16 vector (norm weight, bias) on the device, its storage kept in w.small.
Tensor upload_small_bf16(Backend& backend, ModelWeights& w, const std::vector<uint16_t>& v);

// Tensor contents as bf16 bits (converted from f16/f32 where needed). Error for other dtypes.
std::vector<uint16_t> to_bf16(const SafetensorsTensor& t, const std::string& file);
// The same into out (t.numel() elements).
void to_bf16_into(const SafetensorsTensor& t, const std::string& file, uint16_t* out);

}  // namespace nanovllm
