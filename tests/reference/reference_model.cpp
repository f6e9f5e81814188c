#include "reference/reference_model.h"

#include <cmath>
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "model/safetensors.h"
#include "reference/ops_reference.h"
#include "reference/quantized_reference.h"
#include "model/weights.h"
#include "runtime/tensor.h"
#include "runtime/fp8.h"
#include "util/check.h"

namespace nanovllm::ref {

namespace {

using Vec = std::vector<float>;

float widen(const uint8_t* p, DType dtype) {
  uint16_t h;
  float f;
  switch (dtype) {
    case DType::BF16: {
      std::memcpy(&h, p, 2);
      uint32_t u = uint32_t(h) << 16;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::F16:
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    case DType::F32:
      std::memcpy(&f, p, 4);
      return f;
    default:
      throw std::runtime_error("reference model: unsupported dtype");
  }
}

// x rounded to the nearest bf16 (ties to even).
float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// One weight of the checkpoint, quantized (quantize_rtn) and dequantized to f32.
Vec quantize_dequantize(const Vec& w, int64_t n, int64_t k, QuantScheme scheme, const std::string& name) {
  std::vector<uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) bits[i] = f32_to_bf16(w[i]);  // the bf16 checkpoint's values
  const QuantizedWeight q = quantize_rtn(bits.data(), n, k, scheme, name);
  Vec out(w.size());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i) out[size_t(j * k + i)] = q.dequantize(j, i);
  }
  return out;
}

Vec maybe_round(const Vec& x, bool round) {
  Vec y = x;
  if (round) {
    for (float& v : y) v = round_bf16(v);
  }
  return y;
}

// y[n] = sum_k W[n][k] x[k] (+ b[n]); W row-major [N, K].
Vec matvec(const Vec& W, const Vec& x, size_t N, const Vec* b = nullptr) {
  size_t K = x.size();
  Vec y(N);
  for (size_t n = 0; n < N; ++n) {
    double s = b ? (*b)[n] : 0.0;
    for (size_t k = 0; k < K; ++k) s += double(W[n * K + k]) * x[k];
    y[n] = float(s);
  }
  return y;
}

Vec rmsnorm(const float* x, const Vec& g, size_t n, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  double r = 1.0 / std::sqrt(ss / double(n) + eps);
  Vec y(n);
  for (size_t i = 0; i < n; ++i) y[i] = float(x[i] * r * g[i]);
  return y;
}

// The RoPE frequencies of transformers' rope_init_fn for the config's rope type: default,
// linear (_compute_linear_scaling_rope_parameters), llama3 (_compute_llama3_parameters) and yarn
// (_compute_yarn_parameters), in their own terms: the wavelength bands and torch.where's choices,
// yarn's correction range and linear ramp over arange(dim / 2). attention_factor: what
// transformers multiplies cos and sin by (1 but for yarn).
std::vector<double> rope_inv_freq(size_t D, double theta, const RopeScaling& s,
                                  double* attention_factor) {
  std::vector<double> inv(D / 2);
  for (size_t j = 0; j < D / 2; ++j) inv[j] = 1.0 / std::pow(theta, double(2 * j) / double(D));
  *attention_factor = 1.0;
  if (s.type == "linear") {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == "llama3") {
    const double old_len = s.original_max_position_embeddings;
    const double low_freq_wavelen = old_len / s.low_freq_factor;
    const double high_freq_wavelen = old_len / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * M_PI / f;
      const double llama = wavelen > low_freq_wavelen ? f / s.factor : f;
      const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      const double smoothed = (1 - smooth) * llama / s.factor + smooth * llama;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      f = medium ? smoothed : llama;
    }
  } else if (s.type == "yarn") {
    const double dim = double(D), base = theta, factor = s.factor;
    auto get_mscale = [](double scale, double mscale) {
      return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
    };
    if (s.attention_factor > 0)
      *attention_factor = s.attention_factor;
    else if (s.mscale != 0 && s.mscale_all_dim != 0)
      *attention_factor = get_mscale(factor, s.mscale) / get_mscale(factor, s.mscale_all_dim);
    else
      *attention_factor = get_mscale(factor, 1.0);
    auto find_correction_dim = [&](double num_rotations) {
      return (dim * std::log(s.original_max_position_embeddings / (num_rotations * 2 * M_PI))) /
             (2 * std::log(base));
    };
    double low = find_correction_dim(s.beta_fast), high = find_correction_dim(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    for (size_t j = 0; j < D / 2; ++j) {
      const double pos_freq = std::pow(base, double(2 * j) / dim);
      const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
      const double ramp = std::clamp((double(j) - low) / (high - low), 0.0, 1.0);
      const double extrapolation_factor = 1 - ramp;
      inv[j] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
  } else if (s.type != "default") {
    throw std::runtime_error("reference model: rope type " + s.type);
  }
  return inv;
}

// A MoE router's weight ("...mlp.gate.weight", "...block_sparse_moe.gate.weight").
bool is_router(const std::string& name) {
  const std::string tail = ".gate.weight";
  return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
         name.find(".experts.") == std::string::npos;
}

// Rotate-half RoPE of one head at position pos, cos and sin times attention_factor.
void rope(float* x, size_t D, int pos, const std::vector<double>& inv_freq,
          double attention_factor) {
  size_t half = D / 2;
  for (size_t j = 0; j < half; ++j) {
    double a = pos * inv_freq[j];
    double c = attention_factor * std::cos(a), s = attention_factor * std::sin(a);
    double x1 = x[j], x2 = x[j + half];
    x[j] = float(x1 * c - x2 * s);
    x[j + half] = float(x2 * c + x1 * s);
  }
}

}  // namespace

ReferenceModel::ReferenceModel(const std::string& folder, Precision precision, QuantScheme quant)
    : config_(load_model_config(folder)), precision_(precision), quant_(quant) {
  DequantizedLinears stored = dequantize_checkpoint_linears(folder);
  if (!stored.weights.empty() && quant.enabled())
    throw std::runtime_error("reference model: quantization at load of a quantized checkpoint");
  const std::set<std::string> consumed(stored.consumed.begin(), stored.consumed.end());
  for (auto& [name, v] : stored.weights) {
    stored_quantized_.insert(name);
    weights_[name] = std::move(v);
  }
  stored_int4_group_ = stored.int4_group;
  Checkpoint ckpt(folder);
  for (const std::string& name : ckpt.names()) {
    if (consumed.count(name) || stored_quantized_.count(name)) continue;
    const SafetensorsTensor* t = ckpt.find(name);
    Vec v(size_t(t->numel()));
    const size_t es = dtype_size(t->dtype);
    for (size_t i = 0; i < v.size(); ++i) v[i] = widen(t->data + i * es, t->dtype);
    const bool table = name == "model.embed_tokens.weight" || name == "lm_head.weight";
    // Linears quantized at load: every *_proj and expert weight, not the MoE router.
    const bool linear = (name.find("_proj.weight") != std::string::npos ||
                         name.find(".experts.") != std::string::npos) && !is_router(name);
    if (quant.enabled() && t->shape.size() == 2 && (table || linear)) {
      v = quantize_dequantize(v, t->shape[0], t->shape[1],
                              table ? embedding_quantization(quant) : quant, name);
    }
    weights_[name] = std::move(v);
  }
}

const std::vector<float>& ReferenceModel::w(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) throw std::runtime_error("reference model: missing " + name);
  return it->second;
}

int64_t ReferenceModel::x_grid(const std::string& weight) const {
  if (stored_quantized_.count(weight)) {
    auto it = stored_int4_group_.find(weight);
    return it == stored_int4_group_.end() ? -1 : it->second;
  }
  if (!quant_.enabled() || is_router(weight)) return 0;
  const bool table = weight == "model.embed_tokens.weight" || weight == "lm_head.weight";
  const QuantScheme s = table ? embedding_quantization(quant_) : quant_;
  return s.format == QuantFormat::Int4 ? s.group : -1;
}

std::vector<float> ReferenceModel::last_logits(const std::vector<int32_t>& tokens) const {
  return logits_at(tokens, {tokens.size() - 1}).front();
}

std::vector<std::vector<float>> ReferenceModel::all_logits(const std::vector<int32_t>& tokens) const {
  std::vector<size_t> rows(tokens.size());
  for (size_t t = 0; t < rows.size(); ++t) rows[t] = t;
  return logits_at(tokens, rows);
}

std::vector<std::vector<float>> ReferenceModel::logits_at(const std::vector<int32_t>& tokens,
                                                          const std::vector<size_t>& rows) const {
  const ModelConfig& c = config_;
  const size_t T = tokens.size(), H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const size_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, V = c.vocab_size;
  const double eps = c.rms_norm_eps;
  const bool bf16 = precision_ != Precision::kFp32;
  const bool fp8_kv = precision_ == Precision::kBf16StorageFp8Kv;
  double rope_factor = 1.0;
  const std::vector<double> inv_freq = rope_inv_freq(D, c.rope_theta, c.rope_scaling, &rope_factor);
  router_gap_ = 1e300;
  // Where the GEMM of `weight` reads x: the quantized GEMM's grid, else bf16 storage.
  const GemmInput gemm_in = [&](const Vec& v, const std::string& weight) {
    const int64_t grid = x_grid(weight);
    return grid > 0 ? round_int8_groups(v, grid) : grid < 0 ? round_int16_grid(v) : maybe_round(v, bf16);
  };
  // Residual stream x[t] (fp32, unrounded).
  std::vector<Vec> x(T, Vec(H));
  const Vec& emb = w("model.embed_tokens.weight");
  for (size_t t = 0; t < T; ++t) std::memcpy(x[t].data(), &emb[size_t(tokens[t]) * H], H * 4);

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    std::vector<Vec> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      Vec h = gemm_in(rmsnorm(x[t].data(), w(p + "input_layernorm.weight"), H, eps), p + "self_attn.q_proj.weight");
      const bool bias = c.attention_bias;
      q[t] = matvec(w(p + "self_attn.q_proj.weight"), h, Hq * D, bias ? &w(p + "self_attn.q_proj.bias") : nullptr);
      k[t] = matvec(w(p + "self_attn.k_proj.weight"), h, Hkv * D, bias ? &w(p + "self_attn.k_proj.bias") : nullptr);
      v[t] = matvec(w(p + "self_attn.v_proj.weight"), h, Hkv * D, bias ? &w(p + "self_attn.v_proj.bias") : nullptr);
      for (size_t hh = 0; hh < Hq; ++hh) {
        if (c.qk_norm) {
          Vec n = rmsnorm(&q[t][hh * D], w(p + "self_attn.q_norm.weight"), D, eps);
          std::memcpy(&q[t][hh * D], n.data(), D * 4);
        }
        rope(&q[t][hh * D], D, int(t), inv_freq, rope_factor);
      }
      for (size_t hh = 0; hh < Hkv; ++hh) {
        if (c.qk_norm) {
          Vec n = rmsnorm(&k[t][hh * D], w(p + "self_attn.k_norm.weight"), D, eps);
          std::memcpy(&k[t][hh * D], n.data(), D * 4);
        }
        rope(&k[t][hh * D], D, int(t), inv_freq, rope_factor);
      }
      if (fp8_kv) {  // the KV cache holds E4M3 codes of unit scale
        for (float& e : k[t]) e = fp8_e4m3_to_float(float_to_fp8_e4m3(e));
        for (float& e : v[t]) e = fp8_e4m3_to_float(float_to_fp8_e4m3(e));
      } else {
        k[t] = maybe_round(k[t], bf16);  // the KV cache is bf16
        v[t] = maybe_round(v[t], bf16);
      }
    }
    for (size_t t = 0; t < T; ++t) {
      Vec att(Hq * D, 0.0f);
      for (size_t hh = 0; hh < Hq; ++hh) {
        const size_t kh = hh / (Hq / Hkv);
        std::vector<double> s(t + 1);
        double mx = -1e300;
        // The layer's sliding window (transformers' sliding_window_overlay): keys u > t - window.
        const size_t window = size_t(c.layer_sliding_window(l));
        const size_t first = window > 0 && t + 1 > window ? t + 1 - window : 0;
        for (size_t u = 0; u < first; ++u) s[u] = -INFINITY;  // exp: 0
        for (size_t u = first; u <= t; ++u) {
          double d = 0;
          for (size_t i = 0; i < D; ++i) d += double(q[t][hh * D + i]) * k[u][kh * D + i];
          s[u] = d / std::sqrt(double(D));
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (size_t i = 0; i < D; ++i) {
          double acc = 0;
          for (size_t u = 0; u <= t; ++u) acc += s[u] * v[u][kh * D + i];
          att[hh * D + i] = float(acc / z);
        }
      }
      Vec o = matvec(w(p + "self_attn.o_proj.weight"), gemm_in(att, p + "self_attn.o_proj.weight"), H);
      for (size_t i = 0; i < H; ++i) x[t][i] += o[i];
    }
    if (c.is_sparse_layer(l)) {
      for (size_t t = 0; t < T; ++t) moe_block(l, x[t], gemm_in);
      continue;
    }
    for (size_t t = 0; t < T; ++t) {
      Vec h = gemm_in(rmsnorm(x[t].data(), w(p + "post_attention_layernorm.weight"), H, eps),
                      p + "mlp.gate_proj.weight");
      Vec g = matvec(w(p + "mlp.gate_proj.weight"), h, I);
      Vec u = matvec(w(p + "mlp.up_proj.weight"), h, I);
      for (size_t i = 0; i < I; ++i) g[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
      Vec d = matvec(w(p + "mlp.down_proj.weight"), gemm_in(g, p + "mlp.down_proj.weight"), H);
      for (size_t i = 0; i < H; ++i) x[t][i] += d[i];
    }
  }
  const std::string head_name = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const Vec& head = w(head_name);
  std::vector<Vec> out;
  for (size_t t : rows) {
    Vec h = gemm_in(rmsnorm(x[t].data(), w("model.norm.weight"), H, eps), head_name);
    out.push_back(matvec(head, h, V));
  }
  return out;
}

// transformers' Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock on one token:
//   router_logits = gate(h); routing_weights = softmax(router_logits, dtype=float);
//   routing_weights, selected = topk(routing_weights, top_k); (norm_topk_prob: / their sum);
//   x += sum over the selected experts e of routing_weight_e * down_e(silu(gate_e(h)) * up_e(h)).
// topk picks by probability; equal probabilities go to the lower expert index (torch leaves ties
// unordered; random weights give none).
void ReferenceModel::moe_block(int layer, Vec& x, const GemmInput& gemm_in) const {
  const ModelConfig& c = config_;
  const size_t H = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
  const std::string router = router_tensor_name(c, layer);
  const Vec normed = rmsnorm(x.data(), w(fmt::format("model.layers.{}.post_attention_layernorm.weight", layer)), H,
                             c.rms_norm_eps);
  const Vec logits = matvec(w(router), gemm_in(normed, router), E);
  double mx = -1e300, z = 0;
  for (float v : logits) mx = std::max(mx, double(v));
  std::vector<double> prob(E);
  for (size_t e = 0; e < E; ++e) z += prob[e] = std::exp(double(logits[e]) - mx);
  for (double& pr : prob) pr /= z;
  std::vector<size_t> order(E);
  for (size_t e = 0; e < E; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  const size_t k = size_t(c.num_experts_per_tok);
  if (k < E) {  // how near this token came to picking another expert
    double scale = 0;
    for (float v : logits) scale = std::max(scale, double(std::fabs(v)));
    router_gap_ = std::min(router_gap_, (double(logits[order[k - 1]]) - logits[order[k]]) / scale);
  }
  order.resize(k);
  double picked = 0;
  for (size_t e : order) picked += prob[e];
  for (size_t e : order) {
    const ExpertNames n = expert_tensor_names(c, layer, int(e));
    const Vec h = gemm_in(normed, n.gate);
    Vec g = matvec(w(n.gate), h, I);
    const Vec u = matvec(w(n.up), h, I);
    for (size_t i = 0; i < I; ++i) g[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
    const Vec d = matvec(w(n.down), gemm_in(g, n.down), H);
    const double weight = c.norm_topk_prob ? prob[e] / picked : prob[e];
    for (size_t i = 0; i < H; ++i) x[i] += float(weight * d[i]);
  }
}

std::vector<int32_t> ReferenceModel::greedy(const std::vector<int32_t>& prompt, int n,
                                            std::vector<double>* gaps) const {
  std::lock_guard lock(greedy_mu_);
  Continuation& memo = greedy_memo_[prompt];
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), memo.tokens.begin(), memo.tokens.end());
  for (int i = int(memo.tokens.size()); i < n; ++i) {
    Vec logits = last_logits(tokens);
    int32_t best = 0;
    for (size_t j = 1; j < logits.size(); ++j) {
      if (logits[j] > logits[best]) best = int32_t(j);
    }
    double second = -1e300, scale = 0;
    for (size_t j = 0; j < logits.size(); ++j) {
      if (int32_t(j) != best) second = std::max(second, double(logits[j]));
      scale = std::max(scale, double(std::fabs(logits[j])));
    }
    memo.gaps.push_back(std::min((logits[best] - second) / scale, router_gap_));
    memo.tokens.push_back(best);
    tokens.push_back(best);
  }
  const size_t k = size_t(std::max(n, 0));
  if (gaps) gaps->insert(gaps->end(), memo.gaps.begin(), memo.gaps.begin() + ptrdiff_t(k));
  return {memo.tokens.begin(), memo.tokens.begin() + ptrdiff_t(k)};
}

}  // namespace nanovllm::ref
