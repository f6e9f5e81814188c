#pragma once
// Napkin math of a model: bytes a decode step reads and FLOPs a token costs.
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/hf_config.h"
#include "runtime/quant.h"

namespace nanovllm {

// Parameters of the experts one token runs (num_experts_per_tok of each sparse layer). 0 for a
// dense model.
inline int64_t expert_params_per_token(const ModelConfig& c) {
  int64_t total = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i)
    if (c.is_sparse_layer(i))
      total += int64_t(c.num_experts_per_tok) * 3 * c.moe_intermediate_size * c.hidden_size;
  return total;
}

// Parameters of the linear layers of all decoder layers (q, k, v, o, gate, up, down) that one
// token runs: a sparse MoE layer counts its router and num_experts_per_tok experts.
inline int64_t decoder_linear_params(const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q = int64_t(c.num_attention_heads) * D, kv = int64_t(c.num_key_value_heads) * D;
  int64_t total = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    total += (q + 2 * kv) * H + H * q;
    total += c.is_sparse_layer(i) ? int64_t(c.num_experts) * H : 3 * I * H;  // router or MLP
  }
  return total + expert_params_per_token(c);
}

// Experts of one sparse layer that a decode step of `tokens` tokens reads, in expectation when
// every token picks its k of E experts uniformly and independently: E (1 - (1 - k/E)^tokens).
// 1 token: k; Qwen3-30B-A3B (128, 8) at 16 tokens: 82.4, at 32: 111.8.
inline double expected_active_experts(const ModelConfig& c, double tokens) {
  const double E = c.num_experts, k = c.num_experts_per_tok;
  return E * (1.0 - std::pow(1.0 - k / E, tokens));
}

// Weight bytes of the experts (gate_up and down, in `linear`) that one decode step of `tokens`
// tokens reads: the expected active experts of every sparse layer. 0 for a dense
// model.
inline double expert_bytes_per_decode_step(const ModelConfig& c, QuantScheme linear = {},
                                           double tokens = 1) {
  const int64_t H = c.hidden_size, Ie = c.moe_intermediate_size;
  double total = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i)
    if (c.is_sparse_layer(i))
      total += expected_active_experts(c, tokens) *
               (double(2 * Ie) * double(H) * quantized_bytes_per_weight(linear, H) +
                double(H) * double(Ie) * quantized_bytes_per_weight(linear, Ie));
  return total;
}

// Weight bytes one decode step of `tokens` tokens streams: every decoder linear (in `linear`;
// of a sparse layer the bf16 router and the expected active experts), the lm_head (in `table`),
// the bf16 norms. Quantized formats count their scales (runtime/quant.h).
inline int64_t weight_bytes_per_decode_step(const ModelConfig& c, QuantScheme linear = {},
                                            QuantScheme table = {}, double tokens = 1) {
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q = int64_t(c.num_attention_heads) * D, kv = int64_t(c.num_key_value_heads) * D;
  auto bytes = [](QuantScheme s, int64_t n, int64_t k) {
    return double(n) * double(k) * quantized_bytes_per_weight(s, k);
  };
  double layers = expert_bytes_per_decode_step(c, linear, tokens);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    layers += bytes(linear, q + 2 * kv, H) + bytes(linear, H, q);
    if (c.is_sparse_layer(i)) {
      layers += bytes({}, c.num_experts, H);  // the router, bf16
    } else {
      layers += bytes(linear, 2 * I, H) + bytes(linear, H, I);
    }
  }
  const int64_t norms = int64_t(c.num_hidden_layers) * (2 * H + 2 * D) + H;
  return int64_t(layers + bytes(table, c.vocab_size, H)) + 2 * norms;
}

// Matmul FLOPs of one prompt token (2 per multiply-add; attention and lm_head excluded).
inline double matmul_flops_per_token(const ModelConfig& c) { return 2.0 * double(decoder_linear_params(c)); }

// FLOPs of the lm_head for one sampled token.
inline double lm_head_flops(const ModelConfig& c) { return 2.0 * double(c.vocab_size) * c.hidden_size; }

// Attention FLOPs of one query over `context` keys, all layers (q.k and p.v: 4 per head dim).
inline double attention_flops(const ModelConfig& c, double context) {
  return 4.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * context;
}

// KV cache bytes of one token, all layers, k and v, `elem` bytes per element.
inline int64_t kv_bytes_per_token(const ModelConfig& c, int64_t elem) {
  return 2 * int64_t(c.num_hidden_layers) * c.num_key_value_heads * c.head_dim * elem;
}

// The work of a generate over sequences of prompt[i] tokens and output[i] tokens (ignore_eos),
// split as the engine runs it: the prompts (the first output token is sampled from the prompt's
// last position), then output - 1 decode tokens per sequence, the one of output token j
// attending to prompt + j keys.
struct PhaseWork {
  double prefill_flops = 0;    // matmuls of every prompt token, causal attention, the lm_head of
                               // each prompt's last token
  double decode_tokens = 0;
  double decode_flops = 0;     // matmuls, attention and lm_head of every decode token
  double decode_kv_bytes = 0;  // KV read by the decode tokens' attention
  double decode_attention_flops = 0;  // the attention part of decode_flops
};

// sum of min(n, window) over n = a..b (window 0: of n), the keys that queries seeing a..b keys
// read under a sliding window.
inline double windowed_keys(double a, double b, int window) {
  if (b < a) return 0;
  const double w = window;
  if (window <= 0 || b <= w) return (a + b) * (b - a + 1) / 2;
  if (a > w) return w * (b - a + 1);
  return (a + w) * (w - a + 1) / 2 + w * (b - w);
}

// Keys read by queries seeing a..b keys each, averaged over the layers (the full-attention
// layers of a partly windowed model see them all): attention_flops and the KV bytes count all
// layers at once.
inline double layer_mean_keys(const ModelConfig& c, double a, double b) {
  if (c.sliding_window <= 0 || c.num_hidden_layers <= 0) return windowed_keys(a, b, 0);
  const double full = double(c.full_attention_layers.size()) / c.num_hidden_layers;
  return full * windowed_keys(a, b, 0) + (1 - full) * windowed_keys(a, b, c.sliding_window);
}

inline PhaseWork phase_work(const ModelConfig& c, const std::vector<int>& prompt,
                            const std::vector<int>& output, int64_t kv_elem_bytes) {
  PhaseWork w;
  const double kvb = double(kv_bytes_per_token(c, kv_elem_bytes));
  for (size_t i = 0; i < prompt.size(); ++i) {
    const double p = prompt[i], o = output[i];
    // causal prefill: query t (0-based) attends to t + 1 keys (at most the sliding window)
    w.prefill_flops += p * matmul_flops_per_token(c) +
                       attention_flops(c, layer_mean_keys(c, 1, p)) + lm_head_flops(c);
    if (o <= 1) continue;
    // decode token j = 1..o-1 attends to p + j keys (at most the sliding window)
    const double keys = layer_mean_keys(c, p + 1, p + o - 1);
    w.decode_tokens += o - 1;
    w.decode_flops += (o - 1) * (matmul_flops_per_token(c) + lm_head_flops(c)) + attention_flops(c, keys);
    w.decode_attention_flops += attention_flops(c, keys);
    w.decode_kv_bytes += keys * kvb;
  }
  return w;
}

}  // namespace nanovllm
