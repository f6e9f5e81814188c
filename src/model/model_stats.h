#pragma once
// Napkin math of a model: bytes a decode step reads and FLOPs a token costs.
#include <cstdint>

#include "model/hf_config.h"

namespace nanovllm {

// Parameters of the linear layers of all decoder layers (q, k, v, o, gate, up, down).
inline int64_t decoder_linear_params(const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q = int64_t(c.num_attention_heads) * D, kv = int64_t(c.num_key_value_heads) * D;
  return int64_t(c.num_hidden_layers) * ((q + 2 * kv) * H + H * q + 3 * I * H);
}

// bf16 weight bytes one decode step streams: every decoder linear, the lm_head, the norms.
inline int64_t weight_bytes_per_decode_step(const ModelConfig& c) {
  const int64_t norms = int64_t(c.num_hidden_layers) * (2 * c.hidden_size + 2 * c.head_dim) + c.hidden_size;
  return 2 * (decoder_linear_params(c) + int64_t(c.vocab_size) * c.hidden_size + norms);
}

// Matmul FLOPs of one prompt token (2 per multiply-add; attention and lm_head excluded).
inline double matmul_flops_per_token(const ModelConfig& c) { return 2.0 * double(decoder_linear_params(c)); }

}  // namespace nanovllm
