#include "model/weights.h"

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "model/quantized_checkpoint.h"

namespace nanovllm {

void to_bf16_into(const SafetensorsTensor& t, const std::string& file, uint16_t* out) {
  const size_t n = size_t(t.numel());
  switch (t.dtype) {
    case DType::BF16:
      std::memcpy(out, t.data, n * 2);
      break;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = f32_to_bf16(f16_to_f32(h));
      }
      break;
    case DType::F32:
      for (size_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, t.data + 4 * i, 4);
        out[i] = f32_to_bf16(f);
      }
      break;
    default:
      fail("{}: tensor '{}' has dtype {}; weights must be bf16, f16 or f32", file, t.name,
           dtype_name(t.dtype));
  }
}

std::vector<uint16_t> to_bf16(const SafetensorsTensor& t, const std::string& file) {
  std::vector<uint16_t> out(size_t(t.numel()));
  to_bf16_into(t, file, out.data());
  return out;
}

namespace {

class Loader {
 public:
  Loader(const Checkpoint& ckpt, Backend& backend, ModelWeights& w)
      : ckpt_(ckpt), backend_(backend), w_(w) {}

  std::vector<uint16_t> read(const std::string& name, std::vector<int64_t> shape) {
    const SafetensorsTensor& t = ckpt_.get(name, shape);
    return to_bf16(t, ckpt_.file_of(name));
  }

  // Rows of several [n_i, k] tensors stacked into one [sum n_i, k] linear weight. They are staged
  // in one host buffer reused by every weight (grown to the largest, never zeroed): a model's
  // load then touches fresh memory only for the backend's own copy.
  LinearWeight linear(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                      int64_t k, QuantScheme quant) {
    int64_t n = 0;
    for (int64_t r : rows) n += r;
    uint16_t* all = staging(size_t(n * k));
    int64_t row = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const SafetensorsTensor& t = ckpt_.get(names[i], {rows[i], k});
      to_bf16_into(t, ckpt_.file_of(names[i]), all + row * k);
      row += rows[i];
    }
    if (quant.enabled()) {
      return backend_.make_quantized_linear_weight(quantize_rtn(all, n, k, quant, names[0]));
    }
    return backend_.make_linear_weight(
        Tensor::contiguous(all, DType::BF16, {n, k}, DeviceKind::CPU));
  }

  // A decoder linear: the checkpoint's own quantization where it stores one (awq / gptq / fp8,
  // model/quantized_checkpoint.h), the parts stacked; else linear().
  LinearWeight proj(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t k,
                    QuantScheme quant, const CheckpointQuantization& stored) {
    std::vector<std::string> modules;
    for (const std::string& name : names) modules.push_back(module_of(name));
    if (!stored_quantized(ckpt_, stored, modules)) return linear(names, rows, k, quant);
    std::vector<QuantizedWeight> parts;
    for (size_t i = 0; i < modules.size(); ++i)
      parts.push_back(read_quantized_linear(ckpt_, stored, modules[i], rows[i], k));
    return backend_.make_quantized_linear_weight(parts.size() == 1 ? parts[0] : stack_rows(parts));
  }

  // A small bf16 vector (norm weight, bias) concatenated from several tensors.
  Tensor vector(const std::vector<std::string>& names, const std::vector<int64_t>& sizes) {
    std::vector<uint16_t> all;
    for (size_t i = 0; i < names.size(); ++i) {
      std::vector<uint16_t> part = read(names[i], {sizes[i]});
      all.insert(all.end(), part.begin(), part.end());
    }
    return upload_small_bf16(backend_, w_, all);
  }

 private:
  uint16_t* staging(size_t elems) {
    if (elems > staging_size_) {
      staging_.reset(new uint16_t[elems]);  // default-initialized: no zeroing pass
      staging_size_ = elems;
    }
    return staging_.get();
  }

  const Checkpoint& ckpt_;
  Backend& backend_;
  ModelWeights& w_;
  std::unique_ptr<uint16_t[]> staging_;
  size_t staging_size_ = 0;
};

}  // namespace

std::string router_tensor_name(const ModelConfig& c, int layer) {
  const bool mixtral = c.architecture == "MixtralForCausalLM";
  return fmt::format("model.layers.{}.{}.gate.weight", layer, mixtral ? "block_sparse_moe" : "mlp");
}

ExpertNames expert_tensor_names(const ModelConfig& c, int layer, int expert) {
  if (c.architecture == "MixtralForCausalLM") {
    const std::string p = fmt::format("model.layers.{}.block_sparse_moe.experts.{}.", layer, expert);
    return {p + "w1.weight", p + "w3.weight", p + "w2.weight"};
  }
  const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.", layer, expert);
  return {p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"};
}

Tensor upload_small_bf16(Backend& backend, ModelWeights& w, const std::vector<uint16_t>& v) {
  Buffer buf = backend.alloc(v.size() * 2);
  Tensor t = buf.as(DType::BF16, {int64_t(v.size())});
  backend.upload(t, v.data());
  w.small.push_back(std::move(buf));
  return t;
}

QuantScheme embedding_quantization(QuantScheme linear) {
  // int4 keeps the table at int8, as llama.cpp's Q4_0 keeps it at q6_K: on the default model
  // int4 tables add 0.0022 to the mean KLD (docs/quantization.md).
  if (linear.format == QuantFormat::Int4) return {QuantFormat::Int8, 0};
  return linear;
}

ModelWeights load_weights(const Checkpoint& checkpoint, const ModelConfig& c, Backend& backend,
                          QuantScheme quant) {
  check_load_quantization(c.quantization_config, quant);
  const QuantScheme table = embedding_quantization(quant);
  const CheckpointQuantization& stored = c.quantization_config;
  ModelWeights w;
  Loader load(checkpoint, backend, w);
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q_rows = int64_t(c.num_attention_heads) * D;
  const int64_t kv_rows = int64_t(c.num_key_value_heads) * D;

  w.embed_tokens = load.linear({"model.embed_tokens.weight"}, {V}, H, table);
  if (!c.tie_word_embeddings) w.lm_head = load.linear({"lm_head.weight"}, {V}, H, table);
  w.norm = load.vector({"model.norm.weight"}, {H});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerWeights& l = w.layers.emplace_back();
    l.qkv_proj = load.proj({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                            p + "self_attn.v_proj.weight"},
                           {q_rows, kv_rows, kv_rows}, H, quant, stored);
    if (c.attention_bias) {
      l.qkv_bias = load.vector(
          {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"},
          {q_rows, kv_rows, kv_rows});
    }
    l.o_proj = load.proj({p + "self_attn.o_proj.weight"}, {H}, q_rows, quant, stored);
    if (c.is_sparse_layer(i)) {
      const int64_t E = c.num_experts, Ie = c.moe_intermediate_size;
      l.router = load.proj({router_tensor_name(c, i)}, {E}, H, {}, stored);
      for (int e = 0; e < c.num_experts; ++e) {
        const ExpertNames n = expert_tensor_names(c, i, e);
        l.experts.gate_up.push_back(load.proj({n.gate, n.up}, {Ie, Ie}, H, quant, stored));
        l.experts.down.push_back(load.proj({n.down}, {H}, Ie, quant, stored));
      }
    } else {
      l.gate_up_proj = load.proj({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {I, I}, H, quant, stored);
      l.down_proj = load.proj({p + "mlp.down_proj.weight"}, {H}, I, quant, stored);
    }
    l.input_layernorm = load.vector({p + "input_layernorm.weight"}, {H});
    l.post_attention_layernorm = load.vector({p + "post_attention_layernorm.weight"}, {H});
    if (c.qk_norm) {
      l.q_norm = load.vector({p + "self_attn.q_norm.weight"}, {D});
      l.k_norm = load.vector({p + "self_attn.k_norm.weight"}, {D});
    }
  }
  return w;
}

}  // namespace nanovllm
