// config.json / generation_config.json parsing: defaults, the rope_parameters form, and an Error
// naming the file and the field for everything the engine cannot run.
#include "model/hf_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/check.h"

namespace nanovllm {
namespace {

using json = nlohmann::json;
const std::string kPath = "/models/x/config.json";

// The real Qwen3-0.6B config.json (fields and values).
json qwen3_0_6b() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// A Qwen2.5-0.5B-style config.json: no head_dim, no attention_bias field.
json qwen2() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), kPath); }

void expect_error(const json& j, const std::vector<std::string>& parts) {
  try {
    parse(j);
    ADD_FAILURE() << "no error for " << j.dump();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(kPath), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\n lacks: " << p;
  }
}

TEST(HfConfig, Qwen3) {
  ModelConfig c = parse(qwen3_0_6b());
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // explicit, not 1024 / 16
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{151645});
}

TEST(HfConfig, Qwen2DefaultsToBiasesAndNoQkNorm) {
  ModelConfig c = parse(qwen2());
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  json j = qwen2();
  j["attention_bias"] = false;
  EXPECT_FALSE(parse(j).attention_bias);
}

TEST(HfConfig, Qwen3AttentionBiasFromConfig) {
  json j = qwen3_0_6b();
  j["attention_bias"] = true;
  EXPECT_TRUE(parse(j).attention_bias);
  j.erase("attention_bias");
  EXPECT_FALSE(parse(j).attention_bias);
}

TEST(HfConfig, Defaults) {
  json j = qwen3_0_6b();
  for (const char* k : {"num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
                        "tie_word_embeddings", "torch_dtype", "eos_token_id", "rope_scaling"})
    j.erase(k);
  ModelConfig c = parse(j);
  EXPECT_EQ(c.num_key_value_heads, 16);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.eos_token_ids.empty());
  j["head_dim"] = nullptr;  // null means "not set"
  EXPECT_EQ(parse(j).head_dim, 64);
}

TEST(HfConfig, EosList) {
  json j = qwen3_0_6b();
  j["eos_token_id"] = {151645, 151643};
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int>{151645, 151643}));
}

TEST(HfConfig, RopeParametersForm) {
  json j = qwen3_0_6b();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 5e5);
  j["rope_theta"] = 5e5;  // both, agreeing
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 5e5);
  j["rope_theta"] = 1e6;
  expect_error(j, {"'rope_theta'", "'rope_parameters.rope_theta'", "disagree"});
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}};
  expect_error(j, {"'rope_parameters' has no 'rope_theta'"});
}

// The real Llama-3.2-1B config.json (fields and values).
json llama32_1b() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// Mistral-7B-v0.1's config.json: a 4,096-token sliding window.
json mistral_7b_v01() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": true, "vocab_size": 32000})");
}

TEST(HfConfig, LlamaAndMistralConfigs) {
  const ModelConfig l = parse(llama32_1b());
  EXPECT_EQ(l.architecture, "LlamaForCausalLM");
  EXPECT_EQ(l.head_dim, 64);
  EXPECT_FALSE(l.qk_norm);
  EXPECT_FALSE(l.attention_bias);
  EXPECT_TRUE(l.tie_word_embeddings);
  EXPECT_EQ(l.sliding_window, 0);
  EXPECT_EQ(l.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(l.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(l.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(l.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(l.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(l.rope_theta, 5e5);

  const ModelConfig m = parse(mistral_7b_v01());
  EXPECT_EQ(m.architecture, "MistralForCausalLM");
  EXPECT_EQ(m.head_dim, 128);  // hidden / heads
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.rope_scaling.type, "default");
  json j = mistral_7b_v01();
  j["sliding_window"] = nullptr;  // v0.2 and later
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["sliding_window"] = 0;
  expect_error(j, {"'sliding_window' must be positive"});
  // Qwen2's sliding_window counts only under use_sliding_window (false): ignored.
  j = qwen3_0_6b();
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse(j).sliding_window, 0);

  j = llama32_1b();
  j["mlp_bias"] = true;
  expect_error(j, {"'mlp_bias' is true", "not supported"});
  j = llama32_1b();
  j["attention_bias"] = true;
  EXPECT_TRUE(parse(j).attention_bias);
}

// The real Qwen3-30B-A3B and Mixtral-8x7B-v0.1 config.json files (fields and values).
json qwen3_30b_a3b() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}

json mixtral_8x7b() {
  return json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
    "rms_norm_eps": 1e-05, "rope_theta": 1e6, "router_aux_loss_coef": 0.02,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_cache": true, "vocab_size": 32000})");
}

TEST(HfConfig, MixtureOfExpertsConfigs) {
  const ModelConfig q = parse(qwen3_30b_a3b());
  EXPECT_TRUE(q.is_moe());
  EXPECT_TRUE(q.qk_norm);  // Qwen3's attention
  EXPECT_EQ(q.num_experts, 128);
  EXPECT_EQ(q.num_experts_per_tok, 8);
  EXPECT_EQ(q.moe_intermediate_size, 768);
  EXPECT_TRUE(q.norm_topk_prob);
  for (int i : {0, 1, 47}) EXPECT_TRUE(q.is_sparse_layer(i)) << i;
  json j = qwen3_30b_a3b();
  j["mlp_only_layers"] = {0, 3};
  j["decoder_sparse_step"] = 2;
  const ModelConfig sparse = parse(j);
  // transformers: sparse where (i + 1) % step == 0 and i is not in mlp_only_layers
  EXPECT_FALSE(sparse.is_sparse_layer(0));
  EXPECT_TRUE(sparse.is_sparse_layer(1));
  EXPECT_FALSE(sparse.is_sparse_layer(2));
  EXPECT_FALSE(sparse.is_sparse_layer(3));
  EXPECT_TRUE(sparse.is_sparse_layer(5));
  j = qwen3_30b_a3b();
  j.erase("norm_topk_prob");  // Qwen3MoeConfig's default
  EXPECT_FALSE(parse(j).norm_topk_prob);

  const ModelConfig m = parse(mixtral_8x7b());
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.num_experts_per_tok, 2);
  EXPECT_EQ(m.moe_intermediate_size, 14336);  // the experts are intermediate_size wide
  EXPECT_TRUE(m.norm_topk_prob);              // Mixtral always renormalizes
  EXPECT_TRUE(m.is_sparse_layer(0) && m.is_sparse_layer(31));
  EXPECT_FALSE(parse(qwen3_0_6b()).is_moe());
}

TEST(HfConfig, ExpertCountsThatDoNotFitAreRefusedByName) {
  json j = qwen3_30b_a3b();
  j["num_experts_per_tok"] = 129;
  expect_error(j, {"'num_experts_per_tok' (129) must be in [1, 128]"});
  j = qwen3_30b_a3b();
  j["num_experts"] = 0;
  expect_error(j, {"'num_experts' must be positive"});
  j = qwen3_30b_a3b();
  j["moe_intermediate_size"] = -1;
  expect_error(j, {"'moe_intermediate_size' must be positive"});
  j = qwen3_30b_a3b();
  j["mlp_only_layers"] = {48};
  expect_error(j, {"'mlp_only_layers' holds 48, outside [0, 48)"});
  j = qwen3_30b_a3b();
  j["decoder_sparse_step"] = 0;
  expect_error(j, {"'decoder_sparse_step' must be positive"});
  j = mixtral_8x7b();
  j["num_local_experts"] = "8";
  expect_error(j, {"'num_local_experts' must be an integer"});
}

TEST(HfConfig, RopeScalingTypes) {
  json j = llama32_1b();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // the older key
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope_scaling.type, "default");
  // transformers 5 writes rope_parameters (theta and scaling together).
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = llama32_1b()["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 5e5;
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e5);
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  expect_error(j, {"'rope_scaling' (linear) and 'rope_parameters' (llama3)"});
}

TEST(HfConfig, YarnAsQwenDocumentsIt) {
  // Qwen3's model card: add this rope_scaling to config.json for a 131,072-token context.
  json j = qwen3_0_6b();
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);  // transformers' defaults
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 0.0);  // none given: 0.1 ln(factor) + 1
  EXPECT_TRUE(c.rope_scaling.truncate);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.max_context_len(), 131072);  // vLLM's derived length: original x factor
  // Every optional field read; beta 0 means the default (transformers' `or 32`).
  j["rope_scaling"].update({{"beta_fast", 16.0},
                            {"beta_slow", 0},
                            {"attention_factor", 1.5},
                            {"mscale", 0.707},
                            {"mscale_all_dim", 0.707},
                            {"truncate", false}});
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 1.5);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.707);
  EXPECT_FALSE(c.rope_scaling.truncate);
  // No original length: the config's own; no factor: max_position_embeddings / original.
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 40960);
  EXPECT_EQ(c.max_context_len(), 81920);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 10240}};
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.max_context_len(), 40960);
  // A scaled length below max_position_embeddings keeps the latter.
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 1024}};
  EXPECT_EQ(parse(j).max_context_len(), 40960);
  j.erase("rope_scaling");
  EXPECT_EQ(parse(j).max_context_len(), 40960);
  // transformers 5's rope_parameters.
  j["rope_parameters"] = {{"rope_type", "yarn"},
                          {"factor", 4.0},
                          {"rope_theta", 1e6},
                          {"original_max_position_embeddings", 32768}};
  j.erase("rope_theta");
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.max_context_len(), 131072);
}

TEST(HfConfig, MalformedYarnFieldsAreNamed) {
  json j = qwen3_0_6b();
  j["rope_scaling"] = {{"rope_type", "yarn"}};
  expect_error(j, {"'rope_scaling' has neither 'factor' nor 'original_max_position_embeddings'"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 0.0}};
  expect_error(j, {"'rope_scaling.factor' must be positive"});
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 1.0}, {"beta_slow", 2.0}};
  expect_error(j, {"'rope_scaling.beta_fast' (1) must exceed 'beta_slow' (2)"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", "fast"}};
  expect_error(j, {"'rope_scaling.beta_fast' must be a number"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", -1.0}};
  expect_error(j, {"'rope_scaling.attention_factor' must be positive"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", "yes"}};
  expect_error(j, {"'rope_scaling.truncate' must be true or false"});
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 0}};
  expect_error(j, {"'rope_scaling.original_max_position_embeddings' must be positive"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", "big"}};
  expect_error(j, {"'rope_scaling.mscale' must be a number"});
}

TEST(HfConfig, RopeScalingWeDoNotImplementIsRefusedByName) {
  json j = qwen3_0_6b();
  for (const char* type : {"dynamic", "longrope", "su"}) {
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    expect_error(j, {fmt::format("rope scaling '{}' is not supported", type),
                     "rope_scaling.rope_type", "default, linear, llama3, yarn"});
  }
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_error(j, {"rope scaling 'dynamic' is not supported", "rope_scaling.type"});
  j["rope_scaling"] = {{"rope_type", "linear"}};
  expect_error(j, {"'rope_scaling' has no 'factor'"});
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -1.0}};
  expect_error(j, {"'rope_scaling.factor' must be positive"});
  j["rope_scaling"] = llama32_1b()["rope_scaling"];
  j["rope_scaling"].erase("original_max_position_embeddings");
  expect_error(j, {"no 'original_max_position_embeddings'"});
  j["rope_scaling"] = llama32_1b()["rope_scaling"];
  j["rope_scaling"]["high_freq_factor"] = 0.5;
  expect_error(j, {"'rope_scaling.high_freq_factor' (0.5) must exceed 'low_freq_factor' (1)"});
  j["rope_scaling"] = llama32_1b()["rope_scaling"];
  j["rope_scaling"]["low_freq_factor"] = "one";
  expect_error(j, {"'rope_scaling.low_freq_factor' must be a number"});
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 5e5}};
  expect_error(j, {"rope scaling 'longrope' is not supported", "rope_parameters.rope_type"});
  j["rope_parameters"] = 3;
  expect_error(j, {"'rope_parameters' must be an object"});
}

TEST(HfConfig, UnsupportedArchitecture) {
  json j = qwen3_0_6b();
  j["architectures"] = {"GemmaForCausalLM"};
  expect_error(j, {"architecture 'GemmaForCausalLM' is not supported", "Qwen3ForCausalLM",
                   "Qwen2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"});
  j["architectures"] = json::array();
  expect_error(j, {"'architectures'"});
  j.erase("architectures");
  expect_error(j, {"missing field 'architectures'", "Qwen3ForCausalLM"});
  j["architectures"] = "Qwen3ForCausalLM";
  expect_error(j, {"'architectures' must be a non-empty list"});
}

TEST(HfConfig, MissingAndInvalidFields) {
  for (const char* k : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                        "intermediate_size", "vocab_size", "max_position_embeddings"}) {
    json j = qwen3_0_6b();
    j.erase(k);
    expect_error(j, {std::string("missing field '") + k + "'"});
    j[k] = 0;
    expect_error(j, {std::string("'") + k + "' must be positive"});
    j[k] = -3;
    expect_error(j, {std::string("'") + k + "' must be positive"});
    j[k] = "12";
    expect_error(j, {std::string("'") + k + "' must be an integer"});
    j[k] = 12.5;
    expect_error(j, {std::string("'") + k + "' must be an integer"});
    j[k] = 1e12;
    expect_error(j, {std::string("'") + k + "' must be an integer"});
  }
}

TEST(HfConfig, InconsistentShapes) {
  json j = qwen3_0_6b();
  j["num_key_value_heads"] = 5;
  expect_error(j, {"'num_attention_heads' (16) must be a multiple of 'num_key_value_heads' (5)"});
  j = qwen3_0_6b();
  j.erase("head_dim");
  j["hidden_size"] = 1000;
  expect_error(j, {"'hidden_size' (1000) is not a multiple of 'num_attention_heads' (16)"});
  j = qwen3_0_6b();
  j["head_dim"] = 63;
  expect_error(j, {"'head_dim' must be even"});
  j = qwen3_0_6b();
  j["rms_norm_eps"] = 0;
  expect_error(j, {"'rms_norm_eps' must be positive"});
  j = qwen3_0_6b();
  j["rope_theta"] = -1;
  expect_error(j, {"'rope_theta' must be positive"});
  j = qwen3_0_6b();
  j["eos_token_id"] = 151936;
  expect_error(j, {"'eos_token_id'", "outside the vocabulary"});
  j["eos_token_id"] = {1, "2"};
  expect_error(j, {"'eos_token_id' must be an integer"});
  j = qwen3_0_6b();
  j["hidden_act"] = "gelu";
  expect_error(j, {"'hidden_act'", "silu"});
  j = qwen3_0_6b();
  j["tie_word_embeddings"] = 1;
  expect_error(j, {"'tie_word_embeddings' must be true or false"});
}

// Qwen2 / Qwen3 under use_sliding_window, as transformers reads it: the layers from
// max_window_layers on (or those layer_types calls "sliding_attention") attend within
// sliding_window keys, the others to every key; a null window is none. Qwen3-MoE and Llama refuse
// the flag by name; a malformed layer_types names the field.
TEST(HfConfig, QwenSlidingWindowLayers) {
  json j = qwen3_0_6b();  // 28 layers, sliding_window null
  j["use_sliding_window"] = true;
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 20;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.full_attention_layers.size(), 20u);
  EXPECT_EQ(c.layer_sliding_window(0), 0);
  EXPECT_EQ(c.layer_sliding_window(19), 0);
  EXPECT_EQ(c.layer_sliding_window(20), 4096);
  EXPECT_EQ(c.layer_sliding_window(27), 4096);
  j.erase("max_window_layers");  // transformers' default: 28, every layer full
  EXPECT_EQ(parse(j).full_attention_layers.size(), 28u);
  std::vector<std::string> types(28, "full_attention");
  types[3] = "sliding_attention";
  j["layer_types"] = types;
  c = parse(j);
  EXPECT_EQ(c.layer_sliding_window(3), 4096);
  EXPECT_EQ(c.layer_sliding_window(4), 0);
  j["use_sliding_window"] = false;  // the flag off: no window whatever layer_types says
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["use_sliding_window"] = true;
  j["layer_types"] = std::vector<std::string>(27, "full_attention");
  expect_error(j, {"'layer_types' must list 28 layer types"});
  types[5] = "chunked_attention";
  j["layer_types"] = types;
  expect_error(j, {"'layer_types' holds \"chunked_attention\""});
  j = qwen3_30b_a3b();
  j["use_sliding_window"] = true;
  expect_error(j, {"'use_sliding_window' is true", "Qwen3MoeForCausalLM"});
}

TEST(HfConfig, NotJsonOrNotAnObject) {
  EXPECT_THROW(parse_model_config("{", kPath), Error);
  EXPECT_THROW(parse_model_config("[1]", kPath), Error);
  EXPECT_THROW(parse_model_config("{\"a\":\"\xff\"}", kPath), Error);
  EXPECT_THROW(parse_model_config(qwen3_0_6b().dump() + std::string(1, '\0') + "junk", kPath),
               Error);
  // Deep nesting is an error, not a stack overflow.
  json j = qwen3_0_6b();
  std::string deep = j.dump();
  deep.insert(1, "\"x\":" + std::string(100000, '[') + std::string(100000, ']') + ",");
  EXPECT_NO_THROW(parse_model_config(deep, kPath));
  j.erase("hidden_act");
  deep = j.dump();
  deep.insert(1, "\"hidden_act\":" + std::string(100000, '[') + std::string(100000, ']') + ",");
  EXPECT_THROW(parse_model_config(deep, kPath), Error);
  try {
    parse_model_config("[1]", kPath);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(kPath + ": not a JSON object"), std::string::npos);
  }
}

class HfConfigFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("nanovllm_hf_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(HfConfigFiles, LoadModelConfig) {
  try {
    load_model_config(dir_.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "config.json").string()), std::string::npos);
  }
  write("config.json", qwen3_0_6b().dump());
  EXPECT_EQ(load_model_config(dir_.string()).head_dim, 128);
}

TEST_F(HfConfigFiles, GenerationConfig) {
  GenerationConfig none = load_generation_config(dir_.string());  // missing: empty
  EXPECT_TRUE(none.eos_token_ids.empty());
  EXPECT_FALSE(none.temperature || none.top_k || none.top_p);
  write("generation_config.json",
        R"({"bos_token_id":151643,"do_sample":true,"eos_token_id":[151645,151643],)"
        R"("pad_token_id":151643,"temperature":0.6,"top_k":20,"top_p":0.95})");
  GenerationConfig g = load_generation_config(dir_.string());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{151645, 151643}));
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  write("generation_config.json", R"({"eos_token_id":7})");
  g = load_generation_config(dir_.string());
  EXPECT_EQ(g.eos_token_ids, std::vector<int>{7});
  EXPECT_FALSE(g.temperature.has_value());
  write("generation_config.json", R"({"top_p":"high"})");
  try {
    load_generation_config(dir_.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: field 'top_p'"),
              std::string::npos)
        << e.what();
  }
  write("generation_config.json", "{oops");
  EXPECT_THROW(load_generation_config(dir_.string()), Error);
}

}  // namespace
}  // namespace nanovllm
