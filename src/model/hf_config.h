#pragma once
// config.json and generation_config.json of a Hugging Face model folder.
#include <optional>
#include <string>
#include <vector>

#include "model/quantization_config.h"

namespace nanovllm {

// RoPE frequency scaling (rope_scaling / rope_parameters). inv_freq_j = theta^(-2j / D), then:
//   default: unchanged;  linear: inv_freq / factor;
//   llama3: wavelength 2 pi / inv_freq against the original context L: above L / low_freq_factor
//     inv_freq / factor, below L / high_freq_factor unchanged, between them the blend
//     (1 - s) inv_freq / factor + s inv_freq with s = (L / wavelength - low) / (high - low).
//   yarn (transformers' _compute_yarn_parameters): dimension pairs j below the one that turns
//     beta_fast times over L keep inv_freq, those above the one that turns beta_slow times take
//     inv_freq / factor, a linear ramp between (floored / ceiled bounds unless truncate is
//     false); cos and sin are multiplied by the attention factor (given, or 0.1 ln(factor) + 1,
//     or DeepSeek's mscale / mscale_all_dim ratio of that form).
struct RopeScaling {
  std::string type = "default";  // "default" | "linear" | "llama3" | "yarn"
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int original_max_position_embeddings = 0;              // llama3, yarn (default: the config's)
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;                         // yarn: 0 when the config gives none
  double mscale = 0.0, mscale_all_dim = 0.0;             // yarn: 0 when absent
  bool truncate = true;                                  // yarn
};

// The fields of config.json the engine uses. Supported: Qwen3ForCausalLM, Qwen2ForCausalLM,
// LlamaForCausalLM, MistralForCausalLM (the same dense decoder: flags below tell them apart), and
// the sparse mixtures of experts Qwen3MoeForCausalLM (Qwen3's attention) and MixtralForCausalLM
// (Mistral's), whose MLPs are num_experts experts behind a router.
struct ModelConfig {
  std::string architecture;           // one of the supported names above
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;        // defaults to num_attention_heads
  int head_dim = 0;                   // defaults to hidden_size / num_attention_heads
  int intermediate_size = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;        // rope_theta, or rope_parameters.rope_theta
  RopeScaling rope_scaling;
  // The attention window (0: none): the query at p attends to keys (p - sliding_window, p]
  // (Mistral: every layer; Qwen2 / Qwen3 under use_sliding_window: the layers not in
  // full_attention_layers, which layer_types or max_window_layers give).
  int sliding_window = 0;
  std::vector<int> full_attention_layers;
  bool attention_bias = false;        // q/k/v biases (Qwen2: true unless the config says otherwise)
  bool qk_norm = false;               // per-head q_norm / k_norm before RoPE (Qwen3)
  bool tie_word_embeddings = false;
  std::string torch_dtype;            // informational ("bfloat16", ...)
  std::vector<int> eos_token_ids;     // config.json eos_token_id (int or list)
  // quantization_config: the checkpoint's own quantized linears (fp8 / awq / gptq); none if absent
  CheckpointQuantization quantization_config;

  // Mixture of experts (num_experts 0: a dense model). A sparse layer's MLP is the router
  // (gate [E, H]) and E experts of intermediate moe_intermediate_size; each token runs the top
  // num_experts_per_tok experts of softmax(router logits), weighted by their probabilities,
  // renormalized to sum 1 when norm_topk_prob (Mixtral: always).
  int num_experts = 0;                 // Qwen3-MoE num_experts, Mixtral num_local_experts
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;       // Mixtral: intermediate_size
  bool norm_topk_prob = false;
  int decoder_sparse_step = 1;         // Qwen3-MoE: layer i is sparse when (i + 1) % step == 0
  std::vector<int> mlp_only_layers;    // Qwen3-MoE: layers kept dense (intermediate_size)

  bool is_moe() const { return num_experts > 0; }
  // The longest context the positions allow: max_position_embeddings, or for yarn
  // original_max_position_embeddings x factor where that is longer (vLLM's derived length).
  int max_context_len() const;
  // Layer i's sliding window: sliding_window, or 0 for a layer of full attention.
  int layer_sliding_window(int i) const;
  // Whether layer i's MLP is the sparse block (transformers' Qwen3MoeDecoderLayer rule).
  bool is_sparse_layer(int i) const;
};

// Reads and validates <folder>/config.json. Throws Error naming the file and the field for a
// missing/invalid field, an unsupported architecture, rope scaling other than default / linear /
// llama3 / yarn, mlp_bias, expert counts that do not fit (num_experts_per_tok > num_experts, ...),
// or a quantization_config that model/quantization_config.h does not support.
ModelConfig load_model_config(const std::string& folder);
// The same from JSON text (path is used in error messages).
ModelConfig parse_model_config(const std::string& json_text, const std::string& path);

// generation_config.json; a missing file gives an empty config.
struct GenerationConfig {
  std::vector<int> eos_token_ids;     // eos_token_id: int or list
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
};
GenerationConfig load_generation_config(const std::string& folder);
// The same from JSON text (path is used in error messages).
GenerationConfig parse_generation_config(const std::string& json_text, const std::string& path);

}  // namespace nanovllm
