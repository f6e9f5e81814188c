#include "model/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "model/checkpoint_quantizer.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "runtime/tensor.h"
#include "tokenizer/tokenizer.h"
#include "util/check.h"

namespace nanovllm {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct Preset {
  std::string architecture;
  int layers, hidden, heads, kv_heads;
  int head_dim;  // 0: not written to config.json (hidden / heads, as Qwen2 configs do)
  int intermediate, vocab, max_position_embeddings;
  double rope_theta, rms_norm_eps;
  bool tie_embeddings;
  std::optional<bool> qkv_bias;     // unset: the architecture's default (Qwen2 true, Qwen3 false)
  int bos_token_id;                 // < 0: vocab + bos_token_id (tiny presets follow --vocab)
  int eos_token_id;                 // config.json; < 0 as bos
  std::vector<int> generation_eos;  // generation_config.json; < 0 as bos
  float temperature, top_p;  // generation_config.json; temperature < 0: neither written
  int top_k;                 // 0: not written
  RopeScaling rope_scaling = {};
  int sliding_window = 0;    // Mistral's; 0: null
  // Mixture of experts (Qwen3-MoE, Mixtral); num_experts 0: dense.
  int num_experts = 0, experts_per_tok = 0;
  int moe_intermediate = 0;           // Qwen3-MoE's moe_intermediate_size (Mixtral: intermediate)
  bool norm_topk_prob = false;        // Qwen3-MoE
  std::vector<int> mlp_only_layers = {};  // Qwen3-MoE: dense layers among the sparse ones
};

Preset find_preset(const std::string& name) {
  if (name == "qwen3-0.6b")
    return {"Qwen3ForCausalLM",
            28,
            1024,
            16,
            8,
            128,
            3072,
            151936,
            40960,
            1e6,
            1e-6,
            true,
            std::nullopt,
            151643,
            151645,
            {151645, 151643},
            0.6f,
            0.95f,
            20};
  if (name == "tiny")
    return {"Qwen3ForCausalLM", 2,  64, 4,        2,    32,    128, 512, 32768, 1e6, 1e-6, true,
            std::nullopt,       -2, -1, {-1, -2}, 0.6f, 0.95f, 20};
  if (name == "tiny-qwen2")
    return {"Qwen2ForCausalLM", 2,  64, 4,        2,    0,    96, 384, 32768, 1e6, 1e-6, false,
            std::nullopt,       -2, -1, {-1, -2}, 0.7f, 0.8f, 20};
  // Llama 3.2's RoPE scaling; tiny shapes otherwise (the low frequencies it scales turn even at
  // the first positions, so a missing or wrong scaling changes the tiny model's outputs).
  const RopeScaling llama3{"llama3", 32.0, 1.0, 4.0, 8192};
  // Hidden 64 as "tiny" (the bf16-storage reference's 1e-3 bound holds at these sizes; rounding
  // flips of a wider hidden exceed it now and then, on Qwen presets too).
  if (name == "tiny-llama")
    return {"LlamaForCausalLM", 2,  64, 4,        2,    32,   128, 512, 131072, 5e5, 1e-5, true,
            std::nullopt,       -2, -1, {-1, -2}, 0.6f, 0.9f, 0,   llama3};
  if (name == "tiny-mistral")  // a 24-token sliding window: the tests' prompts run past it
    return {"MistralForCausalLM", 2,  64, 4,    2,     32,   96, 512, 32768, 1e6, 1e-5, false,
            std::nullopt,         -2, -1, {-1}, -1.0f, 1.0f, 0,  {},  24};
  if (name == "llama3-1b")  // Llama 3.2 1B
    return {"LlamaForCausalLM",
            16,
            2048,
            32,
            8,
            64,
            8192,
            128256,
            131072,
            5e5,
            1e-5,
            true,
            std::nullopt,
            128000,
            128001,
            {128001, 128008, 128009},
            0.6f,
            0.9f,
            0,
            llama3};
  if (name == "mistral-7b")  // Mistral 7B v0.3
    return {"MistralForCausalLM", 32, 4096, 32, 8, 128, 14336, 32768, 32768, 1e6, 1e-5, false,
            std::nullopt,         1,  2,    {2}, -1.0f, 1.0f, 0};
  // Qwen3-MoE with tiny shapes: 16 experts of which 4 run per token (a decode batch leaves most
  // of them with 0-2 tokens, as the real 128 / 8 do), and its middle layer dense (mlp_only_layers)
  // so both kinds of MLP meet in one model.
  if (name == "qwen3-moe-tiny") {
    Preset p{"Qwen3MoeForCausalLM", 3,  64, 4,        2,    32,    128, 512, 32768, 1e6, 1e-6, false,
             std::nullopt,          -2, -1, {-1, -2}, 0.6f, 0.95f, 20};
    p.num_experts = 16, p.experts_per_tok = 4, p.moe_intermediate = 32, p.norm_topk_prob = true;
    p.mlp_only_layers = {1};
    return p;
  }
  if (name == "qwen3-30b-a3b") {  // Qwen/Qwen3-30B-A3B (--layers for fewer of its 48 layers)
    Preset p{"Qwen3MoeForCausalLM", 48,     2048,   32,      4,    128,
             6144,                  151936, 40960,  1e6,     1e-6, false,
             std::nullopt,          151643, 151645, {151645, 151643},
             0.6f,                  0.95f,  20};
    p.num_experts = 128, p.experts_per_tok = 8, p.moe_intermediate = 768, p.norm_topk_prob = true;
    return p;
  }
  if (name == "tiny-mixtral") {  // Mixtral's router (top 2 of 8, always renormalized), untied
    Preset p{"MixtralForCausalLM", 2,  64, 4,    2,     32,   64, 512, 32768, 1e6, 1e-5, false,
             std::nullopt,         -2, -1, {-1}, -1.0f, 1.0f, 0};
    p.num_experts = 8, p.experts_per_tok = 2, p.moe_intermediate = 64;
    return p;
  }
  fail("make-model: unknown preset '{}' (presets: tiny, tiny-qwen2, tiny-llama, tiny-mistral, "
       "qwen3-moe-tiny, tiny-mixtral, qwen3-0.6b, llama3-1b, mistral-7b, qwen3-30b-a3b)",
       name);
}

// How a tensor's values are drawn: mean + std * N(0, 1), or with a random sign (see below).
struct WeightSpec {
  TensorSpec tensor;
  float mean = 0, std = 1;
  bool random_sign = false;  // value = ±(mean + std * N(0, 1)), sign drawn per element
};

// ---- The deterministic generator: splitmix64 streams ----

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xd6e8feb86659fd93ull);
  splitmix64(s);
  return splitmix64(s);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Elements [begin, end) of a tensor: element i comes from chunk i / kChunk, whose stream is seeded
// by (tensor seed, chunk index), so the bytes do not depend on the number of threads.
constexpr int64_t kChunk = 1 << 16;

// Approximately normal values: the sum of four 16-bit uniforms of one splitmix64 draw
// (Irwin-Hall, n = 4) shifted and scaled to mean 0, variance 1. Its tails stop at +-3.46 sigma,
// which random weights do not miss, and it needs no libm, so the bytes are the same everywhere
// (and it is ~10x faster than Box-Muller: the 0.6B preset is dominated by writing the file).
float irwin_hall_normal(uint64_t r) {
  constexpr double kMean = 4 * 32767.5;
  static const float kScale = float(1.0 / std::sqrt(4.0 * (65536.0 * 65536.0 - 1.0) / 12.0));
  uint32_t sum = uint32_t(r & 0xffff) + uint32_t((r >> 16) & 0xffff) +
                 uint32_t((r >> 32) & 0xffff) + uint32_t(r >> 48);
  return float(double(sum) - kMean) * kScale;
}

void fill_chunk(const WeightSpec& w, uint64_t tensor_seed, int64_t chunk, int64_t count,
                uint16_t* out) {
  uint64_t state = mix(tensor_seed, uint64_t(chunk));
  for (int64_t i = 0; i < count; ++i) {
    float v = w.mean + w.std * irwin_hall_normal(splitmix64(state));
    if (w.random_sign && (splitmix64(state) & 1)) v = -v;
    out[i] = f32_to_bf16(v);
  }
}

// The whole tensor's values (a quantized linear is encoded from all of them at once); the same
// bytes write_tensor gives.
std::vector<uint16_t> tensor_values(const WeightSpec& w, uint64_t seed) {
  const uint64_t tensor_seed = mix(seed, fnv1a(w.tensor.name));
  int64_t numel = 1;
  for (int64_t d : w.tensor.shape) numel *= d;
  std::vector<uint16_t> out(static_cast<size_t>(numel));
  for (int64_t b = 0; b < numel; b += kChunk)
    fill_chunk(w, tensor_seed, b / kChunk, std::min(kChunk, numel - b), out.data() + b);
  return out;
}

// Generates one tensor piece by piece (at most kPiece elements in memory) into the writer.
void write_tensor(const WeightSpec& w, uint64_t seed, SafetensorsWriter& writer,
                  std::vector<uint16_t>& buf) {
  constexpr int64_t kPiece = 64 * kChunk;
  const uint64_t tensor_seed = mix(seed, fnv1a(w.tensor.name));
  int64_t numel = 1;
  for (int64_t d : w.tensor.shape) numel *= d;
  const int64_t num_chunks = (numel + kChunk - 1) / kChunk;
  const int num_threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  for (int64_t first = 0; first < num_chunks; first += kPiece / kChunk) {
    const int64_t last = std::min(num_chunks, first + kPiece / kChunk);
    const int64_t piece_begin = first * kChunk, piece_end = std::min(numel, last * kChunk);
    buf.resize(size_t(piece_end - piece_begin));
    auto work = [&](int t, int nt) {
      for (int64_t c = first + t; c < last; c += nt) {
        int64_t b = c * kChunk, e = std::min(numel, b + kChunk);
        fill_chunk(w, tensor_seed, c, e - b, buf.data() + (b - piece_begin));
      }
    };
    const int nt = int(std::min<int64_t>(num_threads, last - first));
    std::vector<std::thread> threads;
    for (int t = 1; t < nt; ++t) threads.emplace_back(work, t, nt);
    work(0, nt);
    for (auto& th : threads) th.join();
    writer.write(buf.data(), buf.size() * sizeof(uint16_t));
  }
}

// ---- Weight scales ----
//
// The residual stream starts at the token embedding ~N(0, 1) per element, and every linear is
// N(0, 1/fan_in), so each projection of an RMS-normalized input has unit RMS again: attention and
// MLP outputs enter the residual at the same scale as the embedding, and the next token depends
// on the whole context rather than on the current token alone. Norm weights are 1 + N(0, 0.1)
// (a real spread, so a missing or misplaced norm weight changes the output). Biases are N(0, 0.5)
// so that a missing q/v bias is visible. With tied embeddings the final norm weight gets a random
// sign per channel: otherwise logits = norm(x) . E would give the current token's own embedding
// (still a large part of x) a logit near hidden/|x| and greedy decoding would repeat the input
// token forever; with random signs that self-match averages out and the logits over the
// vocabulary are a random projection of the whole context. Measured on "tiny" with an fp32
// forward (20 prompts x 24 greedy tokens): top-1 - top-2 median 0.30 logit std, 5th percentile
// 0.02; without the random signs the gap is larger (median 1.8 std) but the output is the input
// token repeated. Random weights leave near-ties in a few percent of steps whatever the scale
// (logits are scale-invariant under the final RMSNorm), so an exact-greedy comparison with a
// reference should stop at the first step whose reference gap is within its tolerance.
std::vector<WeightSpec> weight_specs(const ModelConfig& c) {
  std::vector<WeightSpec> specs;
  auto add = [&](std::string name, std::vector<int64_t> shape, float mean, float std,
                 bool random_sign = false) {
    specs.push_back({{std::move(name), DType::BF16, std::move(shape)}, mean, std, random_sign});
  };
  const int64_t h = c.hidden_size, q = int64_t(c.num_attention_heads) * c.head_dim;
  const int64_t kv = int64_t(c.num_key_value_heads) * c.head_dim, inter = c.intermediate_size;
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    add(name, {out, in}, 0, float(1.0 / std::sqrt(double(in))));
  };
  add("model.embed_tokens.weight", {c.vocab_size, h}, 0, 1);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    add(p + "input_layernorm.weight", {h}, 1, 0.1f);
    linear(p + "self_attn.q_proj.weight", q, h);
    linear(p + "self_attn.k_proj.weight", kv, h);
    linear(p + "self_attn.v_proj.weight", kv, h);
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {q}, 0, 0.5f);
      add(p + "self_attn.k_proj.bias", {kv}, 0, 0.5f);
      add(p + "self_attn.v_proj.bias", {kv}, 0, 0.5f);
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {c.head_dim}, 1, 0.1f);
      add(p + "self_attn.k_norm.weight", {c.head_dim}, 1, 0.1f);
    }
    linear(p + "self_attn.o_proj.weight", h, q);
    add(p + "post_attention_layernorm.weight", {h}, 1, 0.1f);
    if (c.is_sparse_layer(i)) {  // router logits ~N(0, 1) per expert
      linear(router_tensor_name(c, i), c.num_experts, h);
      for (int e = 0; e < c.num_experts; ++e) {
        const ExpertNames n = expert_tensor_names(c, i, e);
        linear(n.gate, c.moe_intermediate_size, h);
        linear(n.up, c.moe_intermediate_size, h);
        linear(n.down, h, c.moe_intermediate_size);
      }
      continue;
    }
    linear(p + "mlp.gate_proj.weight", inter, h);
    linear(p + "mlp.up_proj.weight", inter, h);
    linear(p + "mlp.down_proj.weight", h, inter);
  }
  add("model.norm.weight", {h}, 1, 0.1f, /*random_sign=*/c.tie_word_embeddings);
  if (!c.tie_word_embeddings) linear("lm_head.weight", c.vocab_size, h);
  return specs;
}

void write_json(const std::string& path, const ojson& j) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) fail("{}: write failed", path);
}

ojson config_json(const Preset& p, const MakeModelOptions& o, const std::string& arch,
                  bool qkv_bias, int head_dim, bool tie) {
  const bool qwen3_moe = arch == "Qwen3MoeForCausalLM", mixtral = arch == "MixtralForCausalLM";
  const bool qwen3 = arch == "Qwen3ForCausalLM" || qwen3_moe, qwen2 = arch == "Qwen2ForCausalLM";
  const bool mistral = arch == "MistralForCausalLM" || mixtral;
  if ((qwen3_moe || mixtral) != (p.num_experts > 0))
    fail("make-model: architecture '{}' with preset '{}' ({} experts): MoE architectures take the "
         "MoE presets (qwen3-moe-tiny, tiny-mixtral, qwen3-30b-a3b) and no others",
         arch, o.preset, p.num_experts);
  ojson rope = nullptr;
  if (p.rope_scaling.type == "llama3") {
    rope = {{"factor", p.rope_scaling.factor},
            {"high_freq_factor", p.rope_scaling.high_freq_factor},
            {"low_freq_factor", p.rope_scaling.low_freq_factor},
            {"original_max_position_embeddings", p.rope_scaling.original_max_position_embeddings},
            {"rope_type", "llama3"}};
  }
  ojson j;
  j["architectures"] = {arch};
  j["attention_bias"] = qkv_bias;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = p.bos_token_id;
  if (qwen3_moe) j["decoder_sparse_step"] = 1;
  j["eos_token_id"] = p.eos_token_id;
  if (head_dim > 0) j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = o.hidden.value_or(p.hidden);
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = o.intermediate.value_or(p.intermediate);
  j["max_position_embeddings"] = p.max_position_embeddings;
  if (qwen3 || qwen2) j["max_window_layers"] = o.layers.value_or(p.layers);
  if (!qwen3 && !qwen2 && !mistral) j["mlp_bias"] = false;
  if (qwen3_moe) j["mlp_only_layers"] = p.mlp_only_layers;
  j["model_type"] = qwen3_moe ? "qwen3_moe" : mixtral ? "mixtral" : qwen3 ? "qwen3" : qwen2 ? "qwen2"
                    : mistral ? "mistral" : "llama";
  if (qwen3_moe) {
    j["moe_intermediate_size"] = p.moe_intermediate;
    j["norm_topk_prob"] = p.norm_topk_prob;
  }
  j["num_attention_heads"] = o.heads.value_or(p.heads);
  if (qwen3_moe) j["num_experts"] = p.num_experts;
  if (qwen3_moe || mixtral) j["num_experts_per_tok"] = p.experts_per_tok;
  j["num_hidden_layers"] = o.layers.value_or(p.layers);
  j["num_key_value_heads"] = o.kv_heads.value_or(p.kv_heads);
  if (mixtral) j["num_local_experts"] = p.num_experts;
  if (qwen3_moe || mixtral) j["output_router_logits"] = false;
  if (!qwen3 && !qwen2 && !mistral) j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = p.rms_norm_eps;
  j["rope_scaling"] = rope;
  j["rope_theta"] = p.rope_theta;
  if (qwen3_moe || mixtral) j["router_aux_loss_coef"] = qwen3_moe ? 0.001 : 0.02;
  if (mixtral) j["router_jitter_noise"] = 0.0;
  if (qwen3 || qwen2 || mistral)
    j["sliding_window"] = p.sliding_window > 0 ? ojson(p.sliding_window) : ojson(nullptr);
  j["tie_word_embeddings"] = tie;
  j["torch_dtype"] = "bfloat16";
  j["use_cache"] = true;
  if (qwen3 || qwen2) j["use_sliding_window"] = false;
  j["vocab_size"] = o.vocab.value_or(p.vocab);
  return j;
}

// Removes weight files a previous make-model may have left (a stale index would win on load).
void remove_old_weights(const fs::path& out) {
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    bool shard = n.rfind("model-", 0) == 0 && n.size() > 12 &&
                 n.compare(n.size() - 12, 12, ".safetensors") == 0;
    if (n == "model.safetensors" || n == "model.safetensors.index.json" || shard)
      fs::remove(e.path());
  }
}

// With a Qwen tokenizer, bos/eos follow its special tokens as Qwen's configs do: bos =
// <|endoftext|>, eos = <|im_end|> (config.json) and [<|im_end|>, <|endoftext|>]
// (generation_config.json). Other tokenizers keep the preset's ids (the real model's).
void use_tokenizer_ids(Preset& p, const std::string& folder, int vocab) {
  const std::string path = (fs::path(folder) / "tokenizer.json").string();
  Tokenizer tok = Tokenizer::from_file(path);
  if (tok.vocab_size() > vocab) {
    fail("make-model: vocab {} is smaller than the tokenizer's {} ids ({})", vocab,
         tok.vocab_size(), path);
  }
  const int32_t endoftext = tok.token_to_id("<|endoftext|>");
  const int32_t im_end = tok.token_to_id("<|im_end|>");
  if (endoftext < 0) {  // not Qwen's: the preset's ids (Llama 3's, Mistral's) must be its tokens
    std::vector<int> ids = p.generation_eos;
    ids.push_back(p.bos_token_id);
    ids.push_back(p.eos_token_id);
    for (int id : ids)
      if (id >= tok.vocab_size())
        fail("{}: no <|endoftext|> token, and the preset's special id {} is outside its {} ids", path,
             id, tok.vocab_size());
    return;
  }
  p.bos_token_id = endoftext;
  p.eos_token_id = im_end >= 0 ? im_end : endoftext;
  p.generation_eos = {p.eos_token_id};
  if (im_end >= 0) p.generation_eos.push_back(endoftext);
}

void copy_tokenizer(const std::string& folder, const fs::path& out) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::path src = fs::path(folder) / name;
    if (!fs::exists(src)) continue;
    std::error_code ec;
    fs::copy_file(src, out / name, fs::copy_options::overwrite_existing, ec);
    if (ec) fail("make-model: cannot copy {} to {}: {}", src.string(), out.string(), ec.message());
  }
}

}  // namespace

int preset_vocab_size(const std::string& preset) { return find_preset(preset).vocab; }

void make_model(const MakeModelOptions& o) {
  if (o.out.empty()) fail("make-model: no output folder given");
  Preset p = find_preset(o.preset);
  const int vocab = o.vocab.value_or(p.vocab);
  auto resolve = [vocab](int& id) { id = id < 0 ? vocab + id : id; };
  resolve(p.bos_token_id);
  resolve(p.eos_token_id);
  for (int& id : p.generation_eos) resolve(id);
  if (!o.tokenizer.empty()) use_tokenizer_ids(p, o.tokenizer, vocab);
  const std::string arch = o.architecture.empty() ? p.architecture : o.architecture;
  if (arch != "Qwen3ForCausalLM" && arch != "Qwen2ForCausalLM" && arch != "LlamaForCausalLM" &&
      arch != "MistralForCausalLM" && arch != "Qwen3MoeForCausalLM" && arch != "MixtralForCausalLM")
    fail(
        "make-model: architecture '{}' is not supported (supported: Qwen3ForCausalLM, "
        "Qwen2ForCausalLM, LlamaForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM, "
        "MixtralForCausalLM)",
        arch);
  const bool qwen2 = arch == "Qwen2ForCausalLM";
  const bool qkv_bias = o.qkv_bias.value_or(p.qkv_bias.value_or(qwen2));
  const bool tie = o.tie_embeddings.value_or(p.tie_embeddings);
  const int head_dim = o.head_dim.value_or(p.head_dim);
  if (o.shards < 1) fail("make-model: shards must be >= 1, got {}", o.shards);

  // Validate through the same parser the engine uses, before writing anything big.
  const fs::path out(o.out);
  ojson config = config_json(p, o, arch, qkv_bias, head_dim, tie);
  const CheckpointQuantizer quantizer(o.quantization, o.group_size);
  if (quantizer.enabled()) config = quantizer.with_config(config, o.modules_to_not_convert);
  const std::string config_path = (out / "config.json").string();
  ModelConfig c = parse_model_config(config.dump(), config_path);
  for (int id : p.generation_eos)
    if (id >= c.vocab_size)
      fail("make-model: vocab {} is too small for the preset's eos id {}", c.vocab_size, id);

  std::vector<WeightSpec> specs = weight_specs(c);
  if (size_t(o.shards) > specs.size())
    fail("make-model: {} shards for {} tensors", o.shards, specs.size());
  // The tensors each spec is written as: itself, or a quantized linear's tensors.
  std::vector<std::vector<TensorSpec>> written(specs.size());
  std::vector<bool> quantized(specs.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& t = specs[i].tensor;
    quantized[i] =
        quantizer.enabled() && CheckpointQuantizer::converts(t.name, o.modules_to_not_convert);
    if (quantized[i]) quantizer.check_shape(t.name, t.shape[0], t.shape[1]);
    written[i] = quantized[i] ? quantizer.specs(t.name, t.shape[0], t.shape[1]) : std::vector<TensorSpec>{t};
  }

  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) fail("{}: cannot create folder: {}", o.out, ec.message());
  remove_old_weights(out);
  write_json(config_path, config);
  ojson gen;
  gen["bos_token_id"] = p.bos_token_id;
  gen["do_sample"] = true;
  gen["eos_token_id"] = p.generation_eos;
  gen["pad_token_id"] = p.bos_token_id;
  // Shortest decimal of the float (0.6, not 0.6000000238418579), as the real files have it.
  auto decimal = [](float f) { return std::stod(fmt::format("{}", f)); };
  if (p.temperature >= 0) {
    gen["temperature"] = decimal(p.temperature);
    if (p.top_k > 0) gen["top_k"] = p.top_k;
    gen["top_p"] = decimal(p.top_p);
  }
  write_json((out / "generation_config.json").string(), gen);

  // Shard boundaries: consecutive tensors, about total / shards bytes each, none empty.
  auto nbytes = [&](size_t i) {
    size_t n = 0;
    for (const TensorSpec& t : written[i]) {
      size_t b = dtype_size(t.dtype);
      for (int64_t d : t.shape) b *= size_t(d);
      n += b;
    }
    return n;
  };
  size_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) total += nbytes(i);
  std::vector<size_t> shard_end;  // one past the last tensor of each shard
  size_t acc = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    acc += nbytes(i);
    const size_t cuts = shard_end.size(), need = size_t(o.shards) - 1 - cuts;
    const size_t remaining = specs.size() - i - 1;
    if (need > 0 && remaining >= need &&
        (acc * size_t(o.shards) >= total * (cuts + 1) || remaining == need))
      shard_end.push_back(i + 1);
  }
  shard_end.push_back(specs.size());

  ojson weight_map = ojson::object();
  std::vector<uint16_t> buf;
  size_t begin = 0;
  for (size_t s = 0; s < shard_end.size(); ++s) {
    const std::string file =
        o.shards == 1 ? "model.safetensors"
                      : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, o.shards);
    std::vector<TensorSpec> tensors;
    for (size_t i = begin; i < shard_end[s]; ++i) {
      for (const TensorSpec& t : written[i]) {
        tensors.push_back(t);
        weight_map[t.name] = file;
      }
    }
    SafetensorsWriter writer((out / file).string(), std::move(tensors), {{"format", "pt"}});
    for (size_t i = begin; i < shard_end[s]; ++i) {
      if (!quantized[i]) {
        write_tensor(specs[i], o.seed, writer, buf);
        continue;
      }
      const std::vector<int64_t>& shape = specs[i].tensor.shape;
      for (const auto& bytes : quantizer.encode(tensor_values(specs[i], o.seed).data(), shape[0], shape[1]))
        writer.write(bytes.data(), bytes.size());
    }
    writer.finish();
    begin = shard_end[s];
  }
  if (o.shards > 1) {
    ojson index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    write_json((out / "model.safetensors.index.json").string(), index);
  }
  if (!o.tokenizer.empty()) copy_tokenizer(o.tokenizer, out);
}

void quantize_model_folder(const std::string& from, const MakeModelOptions& o) {
  const CheckpointQuantizer quantizer(o.quantization, o.group_size);
  if (!quantizer.enabled())
    fail("make-model --from: give --quantization fp8, awq, gptq4 or gptq8 (got '{}')",
         o.quantization);
  if (o.out.empty()) fail("make-model: no output folder given");
  if (o.layers || o.hidden || o.heads || o.kv_heads || o.head_dim || o.intermediate || o.vocab ||
      o.qkv_bias || o.tie_embeddings || !o.architecture.empty() || !o.tokenizer.empty() ||
      o.shards != 1)
    fail(
        "make-model --from {}: the folder's shapes, tokenizer and files are kept; drop the "
        "shape, architecture, tokenizer and shard options",
        from);
  std::error_code ec;
  if (fs::exists(o.out) && fs::equivalent(from, o.out, ec))
    fail("make-model --from {}: --out must be another folder", from);

  const fs::path in(from), out(o.out);
  const std::string in_config = (in / "config.json").string();
  std::ifstream f(in_config, std::ios::binary);
  if (!f) fail("{}: cannot read", in_config);
  std::stringstream text;
  text << f.rdbuf();
  ojson config;
  try {
    config = ojson::parse(text.str());
  } catch (const std::exception& e) {
    fail("{}: not JSON: {}", in_config, e.what());
  }
  if (!config.is_object()) fail("{}: not a JSON object", in_config);
  if (config.contains("quantization_config") && !config["quantization_config"].is_null())
    fail("{}: the folder is quantized already (quantization_config); --from needs bf16 weights",
         in_config);
  config = quantizer.with_config(config, o.modules_to_not_convert);
  const std::string out_config = (out / "config.json").string();
  parse_model_config(config.dump(), out_config);  // the engine's own check, before writing

  const Checkpoint ckpt(from);
  const std::vector<std::string> names = ckpt.names();
  std::vector<TensorSpec> specs;
  std::vector<bool> quantized;
  for (const std::string& name : names) {
    const SafetensorsTensor* t = ckpt.find(name);
    const bool convert = CheckpointQuantizer::converts(name, o.modules_to_not_convert);
    if (convert && (t->dtype != DType::BF16 || t->shape.size() != 2))
      fail("{}: tensor '{}' is {} of {} dimensions; --from quantizes 2-d bf16 linears",
           ckpt.file_of(name), name, dtype_name(t->dtype), t->shape.size());
    quantized.push_back(convert);
    if (!convert) {
      specs.push_back({name, t->dtype, t->shape});
      continue;
    }
    quantizer.check_shape(name, t->shape[0], t->shape[1]);
    for (TensorSpec& s : quantizer.specs(name, t->shape[0], t->shape[1]))
      specs.push_back(std::move(s));
  }

  fs::create_directories(out, ec);
  if (ec) fail("{}: cannot create folder: {}", o.out, ec.message());
  remove_old_weights(out);
  for (const auto& e : fs::directory_iterator(in)) {  // tokenizer, generation config, ...
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || n == "config.json" || n == "model.safetensors.index.json" ||
        (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0))
      continue;
    fs::copy_file(e.path(), out / n, fs::copy_options::overwrite_existing, ec);
    if (ec) fail("make-model: cannot copy {} to {}: {}", e.path().string(), o.out, ec.message());
  }
  write_json(out_config, config);
  SafetensorsWriter writer((out / "model.safetensors").string(), std::move(specs),
                           {{"format", "pt"}});
  std::vector<uint16_t> w;
  for (size_t i = 0; i < names.size(); ++i) {
    const SafetensorsTensor* t = ckpt.find(names[i]);
    if (!quantized[i]) {
      writer.write(t->data, t->nbytes);
      continue;
    }
    w.resize(size_t(t->numel()));
    std::memcpy(w.data(), t->data, t->nbytes);
    for (const auto& bytes : quantizer.encode(w.data(), t->shape[0], t->shape[1]))
      writer.write(bytes.data(), bytes.size());
  }
  writer.finish();
}

}  // namespace nanovllm
