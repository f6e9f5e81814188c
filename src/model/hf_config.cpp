#include "model/hf_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "util/check.h"
#include "util/file.h"
#include "util/json_brief.h"

namespace nanovllm {

namespace {

using json = nlohmann::json;

constexpr const char* kSupported =
    "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM, "
    "MixtralForCausalLM";


// Python's json module (which transformers uses) keeps the last of duplicate keys, as nlohmann
// does, so config files get the same meaning here as there.
json parse_object(const std::string& text, const std::string& path) {
  // nlohmann's lexer takes a NUL byte for the end of input; JSON never holds a raw NUL.
  if (text.find('\0') != std::string::npos) fail("{}: not valid JSON: holds a NUL byte", path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: not a JSON object", path);
  return j;
}


// A field of `obj`, or nullptr when absent or null (HF writes null for "not set").
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int as_int(const json& v, const std::string& path, const std::string& name) {
  if (!v.is_number_integer() || v.get<int64_t>() < std::numeric_limits<int>::min() ||
      v.get<int64_t>() > std::numeric_limits<int>::max())
    fail("{}: field '{}' must be an integer, got {}", path, name, json_brief(v));
  return int(v.get<int64_t>());
}

double as_number(const json& v, const std::string& path, const std::string& name) {
  if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", path, name, json_brief(v));
  return v.get<double>();
}

bool as_bool(const json& v, const std::string& path, const std::string& name) {
  if (!v.is_boolean()) fail("{}: field '{}' must be true or false, got {}", path, name, json_brief(v));
  return v.get<bool>();
}

int positive_int(const json& obj, const char* name, const std::string& path) {
  const json* v = field(obj, name);
  if (!v) fail("{}: missing field '{}'", path, name);
  int x = as_int(*v, path, name);
  if (x <= 0) fail("{}: field '{}' must be positive, got {}", path, name, x);
  return x;
}

// eos_token_id: an int or a list of ints (absent or null: none).
std::vector<int> eos_ids(const json& obj, const std::string& path) {
  std::vector<int> ids;
  const json* v = field(obj, "eos_token_id");
  if (!v) return ids;
  if (v->is_array()) {
    for (const json& x : *v) ids.push_back(as_int(x, path, "eos_token_id"));
  } else {
    ids.push_back(as_int(*v, path, "eos_token_id"));
  }
  for (int id : ids)
    if (id < 0) fail("{}: field 'eos_token_id' holds a negative id {}", path, id);
  return ids;
}

// A required positive finite number field of a rope scaling object.
double scaling_number(const json& obj, const char* name, const std::string& path,
                      const std::string& where) {
  const json* v = field(obj, name);
  if (!v) fail("{}: field '{}' has no '{}' (needed by its rope type)", path, where, name);
  const std::string full = where + "." + name;
  const double x = as_number(*v, path, full);
  if (!(x > 0) || !std::isfinite(x)) fail("{}: field '{}' must be positive, got {}", path, full, x);
  return x;
}

// The rope scaling of one object (rope_scaling or rope_parameters); nullopt when it names no type.
std::optional<RopeScaling> parse_rope_scaling(const json& obj, const std::string& path,
                                              const std::string& where) {
  const json* t = field(obj, "rope_type");
  const char* key = "rope_type";
  if (!t) {
    t = field(obj, "type");  // the older spelling
    key = "type";
  }
  if (!t) return std::nullopt;
  if (!t->is_string())
    fail("{}: field '{}.{}' must be a string, got {}", path, where, key, json_brief(*t));
  RopeScaling r;
  r.type = t->get<std::string>();
  if (r.type == "default") return r;
  if (r.type != "linear" && r.type != "llama3" && r.type != "yarn")
    fail(
        "{}: rope scaling '{}' is not supported (field '{}.{}'; supported: default, linear, "
        "llama3, yarn)",
        path, r.type, where, key);
  if (r.type == "yarn") {
    // factor may be absent when original_max_position_embeddings is given (transformers then
    // takes max_position_embeddings / original: resolved in parse_rope).
    r.factor = field(obj, "factor") ? scaling_number(obj, "factor", path, where) : 0.0;
    if (const json* o = field(obj, "original_max_position_embeddings")) {
      r.original_max_position_embeddings =
          as_int(*o, path, where + ".original_max_position_embeddings");
      if (r.original_max_position_embeddings <= 0)
        fail("{}: field '{}.original_max_position_embeddings' must be positive, got {}", path,
             where, r.original_max_position_embeddings);
    } else if (r.factor == 0.0) {
      fail(
          "{}: field '{}' has neither 'factor' nor 'original_max_position_embeddings' (yarn needs "
          "one)",
          path, where);
    }
    // transformers: `get("beta_fast") or 32`, so 0 means the default too.
    if (field(obj, "beta_fast") &&
        as_number(*field(obj, "beta_fast"), path, where + ".beta_fast") != 0)
      r.beta_fast = scaling_number(obj, "beta_fast", path, where);
    if (field(obj, "beta_slow") &&
        as_number(*field(obj, "beta_slow"), path, where + ".beta_slow") != 0)
      r.beta_slow = scaling_number(obj, "beta_slow", path, where);
    if (!(r.beta_fast > r.beta_slow))
      fail("{}: field '{}.beta_fast' ({}) must exceed 'beta_slow' ({})", path, where, r.beta_fast,
           r.beta_slow);
    if (field(obj, "attention_factor"))
      r.attention_factor = scaling_number(obj, "attention_factor", path, where);
    if (field(obj, "mscale")) r.mscale = as_number(*field(obj, "mscale"), path, where + ".mscale");
    if (field(obj, "mscale_all_dim"))
      r.mscale_all_dim = as_number(*field(obj, "mscale_all_dim"), path, where + ".mscale_all_dim");
    if (!std::isfinite(r.mscale) || !std::isfinite(r.mscale_all_dim))
      fail("{}: fields '{}.mscale' / 'mscale_all_dim' must be finite", path, where);
    if (const json* t = field(obj, "truncate")) r.truncate = as_bool(*t, path, where + ".truncate");
    return r;
  }
  r.factor = scaling_number(obj, "factor", path, where);
  if (r.type == "llama3") {
    r.low_freq_factor = scaling_number(obj, "low_freq_factor", path, where);
    r.high_freq_factor = scaling_number(obj, "high_freq_factor", path, where);
    if (!(r.high_freq_factor > r.low_freq_factor))
      fail("{}: field '{}.high_freq_factor' ({}) must exceed 'low_freq_factor' ({})", path, where,
           r.high_freq_factor, r.low_freq_factor);
    const json* o = field(obj, "original_max_position_embeddings");
    if (!o) fail("{}: field '{}' has no 'original_max_position_embeddings' (needed by llama3)", path, where);
    r.original_max_position_embeddings = as_int(*o, path, where + ".original_max_position_embeddings");
    if (r.original_max_position_embeddings <= 0)
      fail("{}: field '{}.original_max_position_embeddings' must be positive, got {}", path, where,
           r.original_max_position_embeddings);
  }
  return r;
}

// rope_theta and the scaling, from the top level, rope_scaling and rope_parameters (transformers
// 5 moves both into rope_parameters); where two places give a value they must agree.
void parse_rope(const json& j, const std::string& path, ModelConfig& c) {
  std::optional<double> top, nested;
  std::optional<RopeScaling> scaling;
  if (const json* v = field(j, "rope_theta")) top = as_number(*v, path, "rope_theta");
  if (const json* s = field(j, "rope_scaling")) {
    if (!s->is_object()) fail("{}: field 'rope_scaling' must be an object or null", path);
    scaling = parse_rope_scaling(*s, path, "rope_scaling");
  }
  if (const json* p = field(j, "rope_parameters")) {
    if (!p->is_object()) fail("{}: field 'rope_parameters' must be an object or null", path);
    std::optional<RopeScaling> in_params = parse_rope_scaling(*p, path, "rope_parameters");
    if (scaling && in_params && scaling->type != in_params->type)
      fail("{}: fields 'rope_scaling' ({}) and 'rope_parameters' ({}) name different rope types",
           path, scaling->type, in_params->type);
    if (in_params) scaling = in_params;
    if (const json* v = field(*p, "rope_theta"))
      nested = as_number(*v, path, "rope_parameters.rope_theta");
    else if (!top)
      fail("{}: field 'rope_parameters' has no 'rope_theta'", path);
  }
  if (top && nested && *top != *nested)
    fail("{}: fields 'rope_theta' ({}) and 'rope_parameters.rope_theta' ({}) disagree", path, *top,
         *nested);
  c.rope_theta = nested ? *nested : top ? *top : 10000.0;
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: field 'rope_theta' must be positive, got {}", path, c.rope_theta);
  if (scaling) c.rope_scaling = *scaling;
  RopeScaling& r = c.rope_scaling;
  if (r.type == "yarn") {  // transformers' defaults, which need max_position_embeddings
    if (r.original_max_position_embeddings == 0)
      r.original_max_position_embeddings = c.max_position_embeddings;
    if (r.factor == 0.0)
      r.factor = double(c.max_position_embeddings) / r.original_max_position_embeddings;
  }
}

// An optional integer field, `fallback` when absent (transformers' config-class default).
int int_or(const json& obj, const char* name, const std::string& path, int fallback) {
  const json* v = field(obj, name);
  return v ? as_int(*v, path, name) : fallback;
}

// The expert fields, with the defaults of transformers' Qwen3MoeConfig / MixtralConfig.
void parse_moe(const json& j, const std::string& path, bool mixtral, ModelConfig& c) {
  const char* experts_key = mixtral ? "num_local_experts" : "num_experts";
  c.num_experts = int_or(j, experts_key, path, mixtral ? 8 : 128);
  c.num_experts_per_tok = int_or(j, "num_experts_per_tok", path, mixtral ? 2 : 8);
  if (c.num_experts <= 0) fail("{}: field '{}' must be positive, got {}", path, experts_key, c.num_experts);
  if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts)
    fail("{}: field 'num_experts_per_tok' ({}) must be in [1, {}] ('{}')", path,
         c.num_experts_per_tok, c.num_experts, experts_key);
  if (mixtral) {  // every layer sparse, experts of intermediate_size, always renormalized
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
    return;
  }
  c.moe_intermediate_size = int_or(j, "moe_intermediate_size", path, 768);
  if (c.moe_intermediate_size <= 0)
    fail("{}: field 'moe_intermediate_size' must be positive, got {}", path, c.moe_intermediate_size);
  if (const json* v = field(j, "norm_topk_prob")) c.norm_topk_prob = as_bool(*v, path, "norm_topk_prob");
  c.decoder_sparse_step = int_or(j, "decoder_sparse_step", path, 1);
  if (c.decoder_sparse_step <= 0)
    fail("{}: field 'decoder_sparse_step' must be positive, got {}", path, c.decoder_sparse_step);
  if (const json* v = field(j, "mlp_only_layers")) {
    if (!v->is_array()) fail("{}: field 'mlp_only_layers' must be a list of layer indices, got {}", path, json_brief(*v));
    for (const json& x : *v) {
      const int layer = as_int(x, path, "mlp_only_layers");
      if (layer < 0 || layer >= c.num_hidden_layers)
        fail("{}: field 'mlp_only_layers' holds {}, outside [0, {}) ('num_hidden_layers')", path,
             layer, c.num_hidden_layers);
      c.mlp_only_layers.push_back(layer);
    }
  }
}

}  // namespace

bool ModelConfig::is_sparse_layer(int i) const {
  if (num_experts <= 0 || (i + 1) % decoder_sparse_step != 0) return false;
  for (int l : mlp_only_layers)
    if (l == i) return false;
  return true;
}

// Sliding-window attention, as transformers reads it. Mistral and Mixtral: every layer attends
// within sliding_window keys when it is set. Qwen2 and Qwen3: only under use_sliding_window, and
// then only the layers that layer_types calls "sliding_attention" (by default those from
// max_window_layers on, 28 when absent). Llama has none. Qwen3-MoE's use_sliding_window is
// refused by name.
namespace {

void parse_sliding_window(const json& j, const std::string& path, bool mistral, bool qwen,
                          ModelConfig& c) {
  const json* use = field(j, "use_sliding_window");
  const bool use_window = use && as_bool(*use, path, "use_sliding_window");
  if (use_window && !qwen && !mistral)
    fail(
        "{}: field 'use_sliding_window' is true; sliding-window attention is not supported for "
        "{}",
        path, c.architecture);
  const json* v = field(j, "sliding_window");
  if (!v || !(mistral || use_window)) return;
  c.sliding_window = as_int(*v, path, "sliding_window");
  if (c.sliding_window <= 0)
    fail("{}: field 'sliding_window' must be positive or null, got {}", path, c.sliding_window);
  if (mistral) return;
  std::vector<std::string> types;
  if (const json* t = field(j, "layer_types")) {
    if (!t->is_array() || int(t->size()) != c.num_hidden_layers)
      fail("{}: field 'layer_types' must list {} layer types (num_hidden_layers), got {}", path,
           c.num_hidden_layers, json_brief(*t));
    for (const json& e : *t) {
      if (!e.is_string() || (e != "full_attention" && e != "sliding_attention"))
        fail(
            "{}: field 'layer_types' holds {}; expected \"full_attention\" or "
            "\"sliding_attention\"",
            path, json_brief(e));
      types.push_back(e.get<std::string>());
    }
  } else {
    int max_window_layers = 28;  // transformers' default
    if (const json* m = field(j, "max_window_layers"))
      max_window_layers = as_int(*m, path, "max_window_layers");
    for (int i = 0; i < c.num_hidden_layers; ++i)
      types.push_back(i >= max_window_layers ? "sliding_attention" : "full_attention");
  }
  for (int i = 0; i < c.num_hidden_layers; ++i)
    if (types[size_t(i)] == "full_attention") c.full_attention_layers.push_back(i);
}

}  // namespace

int ModelConfig::max_context_len() const {
  if (rope_scaling.type != "yarn") return max_position_embeddings;
  const double scaled = double(rope_scaling.original_max_position_embeddings) * rope_scaling.factor;
  return int(std::clamp(scaled, double(max_position_embeddings), double(1 << 30)));
}

int ModelConfig::layer_sliding_window(int i) const {
  for (int l : full_attention_layers)
    if (l == i) return 0;
  return sliding_window;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& path) {
  json j = parse_object(json_text, path);
  ModelConfig c;

  const json* archs = field(j, "architectures");
  if (!archs) fail("{}: missing field 'architectures' (supported: {})", path, kSupported);
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    fail("{}: field 'architectures' must be a non-empty list of strings, got {}", path,
         json_brief(*archs));
  c.architecture = (*archs)[0].get<std::string>();
  // Qwen3-MoE has Qwen3's attention, Mixtral Mistral's; their MLPs are parse_moe's.
  const bool qwen3_moe = c.architecture == "Qwen3MoeForCausalLM";
  const bool mixtral = c.architecture == "MixtralForCausalLM";
  const bool qwen3 = c.architecture == "Qwen3ForCausalLM" || qwen3_moe;
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool mistral = c.architecture == "MistralForCausalLM" || mixtral;
  const bool llama = c.architecture == "LlamaForCausalLM";
  if (!qwen3 && !qwen2 && !mistral && !llama)
    fail("{}: architecture '{}' is not supported (field 'architectures'; supported: {})", path,
         c.architecture, kSupported);

  c.hidden_size = positive_int(j, "hidden_size", path);
  c.num_hidden_layers = positive_int(j, "num_hidden_layers", path);
  c.num_attention_heads = positive_int(j, "num_attention_heads", path);
  c.intermediate_size = positive_int(j, "intermediate_size", path);
  c.vocab_size = positive_int(j, "vocab_size", path);
  c.max_position_embeddings = positive_int(j, "max_position_embeddings", path);
  c.num_key_value_heads = field(j, "num_key_value_heads")
                              ? positive_int(j, "num_key_value_heads", path)
                              : c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: field 'num_attention_heads' ({}) must be a multiple of 'num_key_value_heads' ({})",
         path, c.num_attention_heads, c.num_key_value_heads);
  if (field(j, "head_dim")) {
    c.head_dim = positive_int(j, "head_dim", path);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(
          "{}: no field 'head_dim' and 'hidden_size' ({}) is not a multiple of "
          "'num_attention_heads' ({})",
          path, c.hidden_size, c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0)
    fail("{}: field 'head_dim' must be even for RoPE, got {}", path, c.head_dim);

  if (const json* v = field(j, "rms_norm_eps")) {
    c.rms_norm_eps = as_number(*v, path, "rms_norm_eps");
    if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
      fail("{}: field 'rms_norm_eps' must be positive, got {}", path, c.rms_norm_eps);
  }
  parse_rope(j, path, c);
  if (const json* v = field(j, "hidden_act")) {
    if (!v->is_string() || v->get<std::string>() != "silu")
      fail("{}: field 'hidden_act' is {}; only \"silu\" is supported", path, json_brief(*v));
  }
  parse_sliding_window(j, path, mistral, qwen2 || (qwen3 && !qwen3_moe), c);
  if (const json* v = field(j, "mlp_bias"); v && as_bool(*v, path, "mlp_bias"))
    fail("{}: field 'mlp_bias' is true; MLP biases are not supported", path);

  // Qwen2 checkpoints carry q/k/v biases (transformers hard-codes them); Qwen3 reads the flag.
  c.attention_bias = qwen2;
  if (const json* v = field(j, "attention_bias"))
    c.attention_bias = as_bool(*v, path, "attention_bias");
  c.qk_norm = qwen3;
  if (const json* v = field(j, "tie_word_embeddings"))
    c.tie_word_embeddings = as_bool(*v, path, "tie_word_embeddings");
  const char* dtype_key = field(j, "torch_dtype") ? "torch_dtype" : "dtype";
  if (const json* v = field(j, dtype_key)) {
    if (!v->is_string())
      fail("{}: field '{}' must be a string, got {}", path, dtype_key, json_brief(*v));
    c.torch_dtype = v->get<std::string>();
  }
  c.eos_token_ids = eos_ids(j, path);
  if (qwen3_moe || mixtral) parse_moe(j, path, mixtral, c);
  if (const json* q = field(j, "quantization_config")) c.quantization_config = parse_quantization_config(*q, path);
  for (int id : c.eos_token_ids)
    if (id >= c.vocab_size)
      fail("{}: field 'eos_token_id' holds {}, outside the vocabulary of {}", path, id,
           c.vocab_size);
  return c;
}

ModelConfig load_model_config(const std::string& folder) {
  std::string path = (std::filesystem::path(folder) / "config.json").string();
  return parse_model_config(read_file(path), path);
}

GenerationConfig load_generation_config(const std::string& folder) {
  std::string path = (std::filesystem::path(folder) / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationConfig{};
  return parse_generation_config(read_file(path), path);
}

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& path) {
  GenerationConfig g;
  json j = parse_object(json_text, path);
  g.eos_token_ids = eos_ids(j, path);
  if (const json* v = field(j, "temperature")) {
    g.temperature = float(as_number(*v, path, "temperature"));
    if (!(*g.temperature >= 0) || !std::isfinite(*g.temperature))
      fail("{}: field 'temperature' must be >= 0, got {}", path, *g.temperature);
  }
  if (const json* v = field(j, "top_k")) g.top_k = as_int(*v, path, "top_k");
  if (const json* v = field(j, "top_p")) {
    g.top_p = float(as_number(*v, path, "top_p"));
    if (!(*g.top_p > 0 && *g.top_p <= 1))
      fail("{}: field 'top_p' must be in (0, 1], got {}", path, *g.top_p);
  }
  return g;
}

}  // namespace nanovllm
