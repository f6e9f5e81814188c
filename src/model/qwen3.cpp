#include "model/qwen3.h"

#include <algorithm>
#include <cmath>

namespace nanovllm {

namespace {

constexpr double kPi = 3.14159265358979323846;

// yarn: the dimension pair that turns r times over the original context L (fractional).
double yarn_pair(double r, int head_dim, double theta, double L) {
  return head_dim * std::log(L / (r * 2 * kPi)) / (2 * std::log(theta));
}

// yarn's weight of the scaled frequency at pair j: 0 up to the pair turning beta_fast times, 1
// from the one turning beta_slow times, linear between.
double yarn_ramp(int j, int head_dim, double theta, const RopeScaling& s) {
  const double L = s.original_max_position_embeddings;
  double lo = yarn_pair(s.beta_fast, head_dim, theta, L),
         hi = yarn_pair(s.beta_slow, head_dim, theta, L);
  if (s.truncate) lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(lo, 0.0), hi = std::min(hi, double(head_dim - 1));
  if (lo == hi) hi += 0.001;
  return std::clamp((j - lo) / (hi - lo), 0.0, 1.0);
}

// inv_freq_j = theta^(-2j / D), scaled as config.rope_scaling says (model/hf_config.h).
double inv_freq(int j, int head_dim, double theta, const RopeScaling& s) {
  const double f = std::pow(theta, -2.0 * j / head_dim);
  if (s.type == "linear") return f / s.factor;
  if (s.type == "yarn") {
    const double w = yarn_ramp(j, head_dim, theta, s);
    return w * f / s.factor + (1 - w) * f;
  }
  if (s.type != "llama3") return f;
  const double wavelen = 2 * kPi / f, L = s.original_max_position_embeddings;
  if (wavelen < L / s.high_freq_factor) return f;  // high frequencies: kept
  if (wavelen > L / s.low_freq_factor) return f / s.factor;  // low frequencies: scaled
  const double smooth = (L / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * f / s.factor + smooth * f;
}

// The factor cos and sin are multiplied by: yarn's attention factor, else 1.
double rope_attention_factor(const RopeScaling& s) {
  if (s.type != "yarn") return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  auto mscale = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
  if (s.mscale != 0 && s.mscale_all_dim != 0) return mscale(s.mscale) / mscale(s.mscale_all_dim);
  return mscale(1.0);
}

// cos/sin of the rotate-half RoPE: row p = [cos(p f_0) .. cos(p f_{D/2-1}), sin(...) ...], times
// the scaling's attention factor.
std::vector<float> rope_table(int max_position, int head_dim, double theta, const RopeScaling& s) {
  const int half = head_dim / 2;
  const double m = rope_attention_factor(s);
  std::vector<float> t(size_t(max_position) * head_dim);
  for (int j = 0; j < half; ++j) {
    const double f = inv_freq(j, head_dim, theta, s);
    for (int p = 0; p < max_position; ++p) {
      double a = p * f;
      t[size_t(p) * head_dim + j] = float(m * std::cos(a));
      t[size_t(p) * head_dim + half + j] = float(m * std::sin(a));
    }
  }
  return t;
}

Tensor carve(char*& cursor, DType dtype, std::initializer_list<int64_t> shape, DeviceKind device) {
  Tensor t = Tensor::contiguous(cursor, dtype, shape, device);
  cursor += (t.nbytes() + 63) / 64 * 64;
  return t;
}

}  // namespace

Qwen3Model::Qwen3Model(const ModelConfig& config, ModelWeights weights, Backend& backend,
                       int max_position)
    : config_(config), weights_(std::move(weights)), backend_(backend) {
  NV_CHECK(config.head_dim % 2 == 0, "head_dim {}", config.head_dim);
  std::vector<float> table = rope_table(max_position, config.head_dim, config.rope_theta, config.rope_scaling);
  cos_sin_buf_ = backend.alloc(table.size() * sizeof(float));
  cos_sin_ = cos_sin_buf_.as(DType::F32, {max_position, config.head_dim});
  backend.upload(cos_sin_, table.data());
}

void Qwen3Model::reserve(int max_tokens, int max_seqs) {
  NV_CHECK(!workspace_.data(), "the workspace is allocated once");
  NV_CHECK(max_tokens >= 1 && max_seqs >= 1, "reserve({}, {})", max_tokens, max_seqs);
  const int64_t T = max_tokens, B = max_seqs;
  const int64_t H = config_.hidden_size, D = config_.head_dim;
  int64_t I = 0;  // the dense MLP's buffers: none when every layer is sparse
  for (int i = 0; i < config_.num_hidden_layers; ++i)
    if (!config_.is_sparse_layer(i)) I = config_.intermediate_size;
  const int64_t qkv = int64_t(config_.num_attention_heads + 2 * config_.num_key_value_heads) * D;
  const int64_t q = int64_t(config_.num_attention_heads) * D;
  const DType act = backend_.activation_dtype();
  const int64_t a = int64_t(dtype_size(act));
  const int64_t R = kMaxLogitRows;
  const int64_t E = config_.num_experts;  // MoE: router logits f32 [T, E] and the block's output
  const int64_t bytes = 64 * 13 + a * (T * (2 * H + qkv + q + 3 * I) + B * H + R * H) +
                        4 * (B + R) * int64_t(config_.vocab_size) + 4 * R +
                        (E > 0 ? 4 * T * E + a * T * H : 0);
  workspace_ = backend_.alloc(size_t(bytes));
  char* cursor = static_cast<char*>(workspace_.data());
  const DeviceKind dev = backend_.device();
  hidden_ = carve(cursor, act, {T, H}, dev);
  residual_ = carve(cursor, act, {T, H}, dev);
  qkv_ = carve(cursor, act, {T, qkv}, dev);
  attn_out_ = carve(cursor, act, {T, q}, dev);
  gate_up_ = carve(cursor, act, {T, 2 * I}, dev);
  mlp_act_ = carve(cursor, act, {T, I}, dev);
  last_hidden_ = carve(cursor, act, {B, H}, dev);
  logits_ = carve(cursor, DType::F32, {B, config_.vocab_size}, dev);
  row_ids_ = carve(cursor, DType::I32, {R}, dev);
  row_hidden_ = carve(cursor, act, {R, H}, dev);
  row_logits_ = carve(cursor, DType::F32, {R, config_.vocab_size}, dev);
  if (E > 0) {
    router_logits_ = carve(cursor, DType::F32, {T, E}, dev);
    moe_out_ = carve(cursor, act, {T, H}, dev);
  }
  mixed_.reserve(backend_, max_seqs);
  capacity_tokens_ = int(T);
  capacity_seqs_ = int(B);
}

Tensor Qwen3Model::forward(const ForwardBatch& batch, const std::vector<LayerKVCache>& kv_cache) {
  NV_CHECK(int(kv_cache.size()) == config_.num_hidden_layers);
  NV_CHECK(batch.num_tokens <= capacity_tokens_ && batch.num_seqs <= capacity_seqs_,
           "a step of {} tokens, {} seqs; the workspace holds {} and {}", batch.num_tokens,
           batch.num_seqs, capacity_tokens_, capacity_seqs_);
  const int64_t T = batch.num_tokens, B = batch.num_seqs;
  Tensor hidden = hidden_.slice_rows(0, T);      // [T, H]
  Tensor residual = residual_.slice_rows(0, T);  // [T, H]
  const float eps = float(config_.rms_norm_eps);
  if (batch.is_prefill && batch.num_decode_seqs > 0) mixed_.split(backend_, batch);

  if (weights_.vocab_parallel) {  // VocabParallelEmbedding: this rank's rows, zeros elsewhere
    backend_.vocab_parallel_embedding(hidden, batch.input_ids, weights_.embed_tokens,
                                      weights_.vocab_start);
    backend_.all_reduce(hidden);  // each token's row comes from the one rank that holds it
  } else {
    backend_.embedding(hidden, batch.input_ids, weights_.embed_tokens);
  }
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    const LayerWeights& l = weights_.layers[i];
    if (i == 0) {  // residual = hidden; hidden = input_layernorm(hidden)
      backend_.copy(residual, hidden);
      backend_.rms_norm(hidden, hidden, l.input_layernorm, eps);
    } else {
      backend_.add_rms_norm(hidden, residual, l.input_layernorm, eps);
    }
    attention(i, batch, kv_cache[i], hidden);
    backend_.add_rms_norm(hidden, residual, l.post_attention_layernorm, eps);
    mlp(i, hidden);
  }
  backend_.add_rms_norm(hidden, residual, weights_.norm, eps);

  Tensor last = last_hidden_.slice_rows(0, B);  // [B, H]
  backend_.gather_rows(last, hidden, batch.last_token_indices);
  Tensor logits = logits_.slice_rows(0, B);     // f32 [B, V]
  backend_.linear(logits, last, weights_.output_projection(), nullptr);
  return logits;
}

Tensor Qwen3Model::row_logits(const int32_t* rows, int n) {
  NV_CHECK(n >= 1 && n <= kMaxLogitRows && workspace_.data(), "row_logits of {} rows", n);
  Tensor ids = row_ids_.slice_rows(0, n);  // i32 [n]
  backend_.upload(ids, rows);
  Tensor h = row_hidden_.slice_rows(0, n);  // [n, H] = hidden[rows]
  backend_.gather_rows(h, hidden_, ids);
  Tensor logits = row_logits_.slice_rows(0, n);  // f32 [n, V] = h @ lm_head^T
  backend_.linear(logits, h, weights_.output_projection(), nullptr);
  return logits;
}

// hidden [T, H] -> hidden = o_proj(attn(rope(norm(q)), rope(norm(k)), v))
void Qwen3Model::attention(int layer, const ForwardBatch& batch, const LayerKVCache& cache,
                           Tensor hidden) {
  const LayerWeights& l = weights_.layers[layer];
  const int64_t T = batch.num_tokens, D = config_.head_dim;
  const int64_t hq = config_.num_attention_heads, hkv = config_.num_key_value_heads;
  Tensor qkv = qkv_.slice_rows(0, T);  // [T, (Hq + 2 Hkv) D]
  backend_.linear(qkv, hidden, l.qkv_proj, l.qkv_bias.data ? &l.qkv_bias : nullptr);
  Tensor q = qkv.slice_last(0, hq * D).unflatten_last(hq);                  // [T, Hq, D]
  Tensor k = qkv.slice_last(hq * D, (hq + hkv) * D).unflatten_last(hkv);    // [T, Hkv, D]
  Tensor v = qkv.slice_last((hq + hkv) * D, (hq + 2 * hkv) * D).unflatten_last(hkv);
  const float eps = float(config_.rms_norm_eps);
  // q/k-norm (Qwen3) + RoPE + store_kv: one launch on CUDA, the separate ops elsewhere.
  const bool qk_norm = l.q_norm.data != nullptr;
  backend_.qk_norm_rope_store_kv(q, k, v, qk_norm ? &l.q_norm : nullptr,
                                 qk_norm ? &l.k_norm : nullptr, eps, batch.positions, cos_sin_,
                                 cache, batch);

  Tensor out = attn_out_.slice_rows(0, T);  // [T, Hq D]
  Tensor out3 = out.unflatten_last(hq);      // [T, Hq, D]
  const float scale = 1.0f / std::sqrt(float(D));
  if (batch.is_prefill && batch.num_decode_seqs > 0) {
    // Mixed step: the decode rows [0, nd) through the decode kernel (as in a decode-only step),
    // the prefill rows [nd, T) through the prefill kernel.
    const int64_t nd = batch.num_decode_seqs;
    backend_.attention_decode(out3.slice_rows(0, nd), q.slice_rows(0, nd), cache, mixed_.decode(),
                              scale);
    backend_.attention_prefill(out3.slice_rows(nd, T), q.slice_rows(nd, T), cache,
                               mixed_.prefill(), scale);
  } else if (batch.is_prefill) {
    backend_.attention_prefill(out3, q, cache, batch, scale);
  } else {
    backend_.attention_decode(out3, q, cache, batch, scale);
  }
  backend_.linear(hidden, out, l.o_proj, nullptr);
  backend_.all_reduce(hidden);  // tensor parallel: sum the ranks' partial products
}

// hidden [T, H] -> hidden = down(silu(gate(hidden)) * up(hidden)); a sparse layer: the sum of
// its top-k experts' outputs, weighted by the router (Backend::fused_moe).
void Qwen3Model::mlp(int layer, Tensor hidden) {
  const LayerWeights& l = weights_.layers[layer];
  const int64_t T = hidden.size(0);
  if (l.router.n) {
    Tensor logits = router_logits_.slice_rows(0, T);  // f32 [T, E] = hidden @ router^T
    backend_.linear(logits, hidden, l.router, nullptr);
    Tensor out = moe_out_.slice_rows(0, T);            // [T, H]
    backend_.fused_moe(out, hidden, logits, l.experts, config_.num_experts_per_tok,
                       config_.norm_topk_prob);
    backend_.copy(hidden, out);
    backend_.all_reduce(hidden);  // tensor parallel: each rank ran its slice of every expert
    return;
  }
  Tensor gate_up = gate_up_.slice_rows(0, T);  // [T, 2 I]
  Tensor act = mlp_act_.slice_rows(0, T);      // [T, I]
  backend_.linear(gate_up, hidden, l.gate_up_proj, nullptr);
  backend_.silu_and_mul(act, gate_up);
  backend_.linear(hidden, act, l.down_proj, nullptr);
  backend_.all_reduce(hidden);  // tensor parallel: sum the ranks' partial products
}

}  // namespace nanovllm
