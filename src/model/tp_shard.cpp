#include "model/tp_shard.h"

#include <fmt/format.h>

#include "model/quantized_checkpoint.h"

namespace nanovllm {

namespace {

// Which query and KV heads rank r holds.
struct HeadRange {
  int64_t q_begin, q_count;
  int64_t kv_begin, kv_count;
};

HeadRange head_range(const ModelConfig& c, TpShard s) {
  const int64_t hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  HeadRange h;
  h.q_count = hq / s.size;
  h.q_begin = s.rank * h.q_count;
  if (hkv >= s.size) {
    h.kv_count = hkv / s.size;
    h.kv_begin = s.rank * h.kv_count;
  } else {
    h.kv_count = 1;
    h.kv_begin = int64_t(s.rank) * hkv / s.size;
  }
  return h;
}

void append(std::vector<uint16_t>& dst, const std::vector<uint16_t>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

// Rows [begin, begin + count) of the [n, k] weight `name`.
struct RowPart {
  std::string name;
  int64_t n, begin, count;
};

class ShardLoader {
 public:
  ShardLoader(const Checkpoint& ckpt, const CheckpointQuantization& stored, Backend& backend, ModelWeights& w)
      : ckpt_(ckpt), stored_(stored), backend_(backend), w_(w) {}

  // Rows [begin, begin + count) of the [n, k] tensor `name`, as bf16 (only they are read).
  std::vector<uint16_t> rows(const std::string& name, int64_t n, int64_t k, int64_t begin, int64_t count) {
    const SafetensorsTensor& t = ckpt_.get(name, k ? std::vector<int64_t>{n, k} : std::vector<int64_t>{n});
    const int64_t width = k ? k : 1;
    SafetensorsTensor part = t;
    part.shape = k ? std::vector<int64_t>{count, k} : std::vector<int64_t>{count};
    part.data = t.data + size_t(begin * width) * dtype_size(t.dtype);
    part.nbytes = size_t(count * width) * dtype_size(t.dtype);
    return to_bf16(part, ckpt_.file_of(name));
  }

  // Columns [begin, begin + count) of every row of the [n, k] tensor `name`.
  std::vector<uint16_t> cols(const std::string& name, int64_t n, int64_t k, int64_t begin, int64_t count) {
    const SafetensorsTensor& t = ckpt_.get(name, {n, k});
    std::vector<uint16_t> out;
    out.reserve(size_t(n * count));
    for (int64_t r = 0; r < n; ++r) {
      SafetensorsTensor part = t;
      part.shape = {count};
      part.data = t.data + size_t(r * k + begin) * dtype_size(t.dtype);
      part.nbytes = size_t(count) * dtype_size(t.dtype);
      std::vector<uint16_t> row = to_bf16(part, ckpt_.file_of(name));
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  }

  LinearWeight linear(std::vector<uint16_t> w, int64_t n, int64_t k, QuantScheme quant,
                      const std::string& name) {
    NV_CHECK(int64_t(w.size()) == n * k, "{} values for [{}, {}]", w.size(), n, k);
    if (quant.enabled()) return backend_.make_quantized_linear_weight(quantize_rtn(w.data(), n, k, quant, name));
    return backend_.make_linear_weight(Tensor::contiguous(w.data(), DType::BF16, {n, k}, DeviceKind::CPU));
  }

  // The row parts of several [n_i, k] decoder linears stacked into one linear weight: from the
  // checkpoint's own quantization where it stores them quantized (each part cut with slice_rows),
  // else as bf16 rows quantized after slicing.
  LinearWeight linear_rows(const std::vector<RowPart>& parts, int64_t k, QuantScheme quant) {
    std::vector<std::string> modules;
    for (const RowPart& p : parts) modules.push_back(module_of(p.name));
    if (stored_quantized(ckpt_, stored_, modules)) {
      std::vector<QuantizedWeight> shards;
      for (const RowPart& p : parts) {
        shards.push_back(slice_rows(read_quantized_linear(ckpt_, stored_, module_of(p.name), p.n, k),
                                    p.begin, p.begin + p.count));
      }
      return backend_.make_quantized_linear_weight(shards.size() == 1 ? shards[0] : stack_rows(shards));
    }
    std::vector<uint16_t> w;
    int64_t n = 0;
    for (const RowPart& p : parts) {
      append(w, rows(p.name, p.n, k, p.begin, p.count));
      n += p.count;
    }
    return linear(std::move(w), n, k, quant, parts[0].name);
  }

  // Columns [begin, begin + count) of the [n, k] weight `name` as a linear weight. Quantized (at
  // load, or stored so in the checkpoint): the whole weight's quantization, the shard cut from it
  // (quant.h slice_cols).
  LinearWeight linear_cols(const std::string& name, int64_t n, int64_t k, int64_t begin,
                           int64_t count, QuantScheme quant) {
    if (stored_quantized(ckpt_, stored_, {module_of(name)})) {
      return backend_.make_quantized_linear_weight(slice_cols(
          read_quantized_linear(ckpt_, stored_, module_of(name), n, k), begin, begin + count, name));
    }
    if (!quant.enabled()) return linear(cols(name, n, k, begin, count), n, count, quant, name);
    const std::vector<uint16_t> whole = rows(name, n, k, 0, n);
    return backend_.make_quantized_linear_weight(
        slice_cols(quantize_rtn(whole.data(), n, k, quant, name), begin, begin + count, name));
  }

  Tensor vector(const std::vector<uint16_t>& v) { return upload_small_bf16(backend_, w_, v); }

 private:
  const Checkpoint& ckpt_;
  const CheckpointQuantization& stored_;
  Backend& backend_;
  ModelWeights& w_;
};

}  // namespace

ModelConfig shard_config(const ModelConfig& full, int tp) {
  if (tp < 1) fail("tensor_parallel_size must be >= 1, got {}", tp);
  const int hq = full.num_attention_heads, hkv = full.num_key_value_heads;
  if (hq % tp != 0) {
    fail("tensor parallelism: num_attention_heads {} is not divisible by tensor_parallel_size {}", hq, tp);
  }
  if (hkv >= tp ? hkv % tp != 0 : tp % hkv != 0) {
    fail("tensor parallelism: num_key_value_heads {} and tensor_parallel_size {}: one must divide "
         "the other", hkv, tp);
  }
  if (full.intermediate_size % tp != 0) {
    fail("tensor parallelism: intermediate_size {} is not divisible by tensor_parallel_size {}",
         full.intermediate_size, tp);
  }
  if (full.is_moe() && full.moe_intermediate_size % tp != 0) {
    fail("tensor parallelism: moe_intermediate_size {} is not divisible by tensor_parallel_size {}",
         full.moe_intermediate_size, tp);
  }
  if (full.vocab_size % tp != 0) {
    fail("tensor parallelism: vocab_size {} is not divisible by tensor_parallel_size {}", full.vocab_size, tp);
  }
  ModelConfig c = full;
  c.num_attention_heads = hq / tp;
  c.num_key_value_heads = hkv >= tp ? hkv / tp : 1;
  c.intermediate_size = full.intermediate_size / tp;
  c.moe_intermediate_size = full.moe_intermediate_size / tp;
  c.vocab_size = full.vocab_size / tp;
  return c;
}

ModelWeights load_weights_shard(const Checkpoint& ckpt, const ModelConfig& c, TpShard s, Backend& backend,
                                QuantScheme quant) {
  const ModelConfig local = shard_config(c, s.size);  // every divisibility error comes first
  check_load_quantization(c.quantization_config, quant);
  const QuantScheme table = embedding_quantization(quant);
  if (s.rank < 0 || s.rank >= s.size) fail("tensor parallel rank {} outside [0, {})", s.rank, s.size);
  ModelWeights w;
  ShardLoader load(ckpt, c.quantization_config, backend, w);
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const int64_t hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  const HeadRange h = head_range(c, s);
  const int64_t i_local = local.intermediate_size, v_local = local.vocab_size;

  // Vocab rows [r V/tp, (r+1) V/tp) of the embedding and the LM head; tied: one tensor for both
  // (lm_head stays empty, as load_weights leaves it).
  w.vocab_parallel = s.size > 1;
  w.vocab_start = s.rank * v_local;
  w.embed_tokens = load.linear(load.rows("model.embed_tokens.weight", V, H, w.vocab_start, v_local),
                               v_local, H, table, "model.embed_tokens.weight");
  if (!c.tie_word_embeddings) {
    w.lm_head = load.linear(load.rows("lm_head.weight", V, H, w.vocab_start, v_local), v_local, H,
                            table, "lm_head.weight");
  }
  w.norm = load.vector(load.rows("model.norm.weight", H, 0, 0, H));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerWeights& l = w.layers.emplace_back();
    // [(q_count + 2 kv_count) D, H]: this rank's q heads, then its k heads, then its v heads.
    l.qkv_proj = load.linear_rows({{p + "self_attn.q_proj.weight", hq * D, h.q_begin * D, h.q_count * D},
                                   {p + "self_attn.k_proj.weight", hkv * D, h.kv_begin * D, h.kv_count * D},
                                   {p + "self_attn.v_proj.weight", hkv * D, h.kv_begin * D, h.kv_count * D}},
                                  H, quant);
    if (c.attention_bias) {
      std::vector<uint16_t> b = load.rows(p + "self_attn.q_proj.bias", hq * D, 0, h.q_begin * D, h.q_count * D);
      append(b, load.rows(p + "self_attn.k_proj.bias", hkv * D, 0, h.kv_begin * D, h.kv_count * D));
      append(b, load.rows(p + "self_attn.v_proj.bias", hkv * D, 0, h.kv_begin * D, h.kv_count * D));
      l.qkv_bias = load.vector(b);
    }
    l.o_proj = load.linear_cols(p + "self_attn.o_proj.weight", H, hq * D, h.q_begin * D,
                                h.q_count * D, quant);
    if (c.is_sparse_layer(i)) {  // the router whole; each expert's intermediate split as a dense MLP's
      const int64_t E = c.num_experts, Ie = c.moe_intermediate_size, ie = local.moe_intermediate_size;
      l.router = load.linear_rows({{router_tensor_name(c, i), E, 0, E}}, H, {});
      for (int e = 0; e < c.num_experts; ++e) {
        const ExpertNames n = expert_tensor_names(c, i, e);
        l.experts.gate_up.push_back(
            load.linear_rows({{n.gate, Ie, s.rank * ie, ie}, {n.up, Ie, s.rank * ie, ie}}, H, quant));
        l.experts.down.push_back(load.linear_cols(n.down, H, Ie, s.rank * ie, ie, quant));
      }
    } else {
      l.gate_up_proj = load.linear_rows({{p + "mlp.gate_proj.weight", I, s.rank * i_local, i_local},
                                         {p + "mlp.up_proj.weight", I, s.rank * i_local, i_local}},
                                        H, quant);
      l.down_proj = load.linear_cols(p + "mlp.down_proj.weight", H, I, s.rank * i_local, i_local, quant);
    }
    l.input_layernorm = load.vector(load.rows(p + "input_layernorm.weight", H, 0, 0, H));
    l.post_attention_layernorm = load.vector(load.rows(p + "post_attention_layernorm.weight", H, 0, 0, H));
    if (c.qk_norm) {
      l.q_norm = load.vector(load.rows(p + "self_attn.q_norm.weight", D, 0, 0, D));
      l.k_norm = load.vector(load.rows(p + "self_attn.k_norm.weight", D, 0, 0, D));
    }
  }
  return w;
}

}  // namespace nanovllm
