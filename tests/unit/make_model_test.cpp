// make-model folders load back through load_model_config + Checkpoint with exactly the tensors
// (names, shapes, bf16) that config.json implies, deterministically for a seed.
#include "model/make_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "runtime/tensor.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

class MakeModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nanovllm_make_model_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string make(MakeModelOptions o, const std::string& name) {
    o.out = (dir_ / name).string();
    make_model(o);
    return o.out;
  }
  fs::path dir_;
};

// The Hugging Face tensor names and shapes for a config, stated independently of make_model.
std::map<std::string, std::vector<int64_t>> expected_tensors(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> t;
  const int64_t h = c.hidden_size, d = c.head_dim, q = c.num_attention_heads * d,
                kv = c.num_key_value_heads * d, i = c.intermediate_size, v = c.vocab_size;
  t["model.embed_tokens.weight"] = {v, h};
  t["model.norm.weight"] = {h};
  if (!c.tie_word_embeddings) t["lm_head.weight"] = {v, h};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = {h};
    t[p + "post_attention_layernorm.weight"] = {h};
    t[p + "self_attn.q_proj.weight"] = {q, h};
    t[p + "self_attn.k_proj.weight"] = {kv, h};
    t[p + "self_attn.v_proj.weight"] = {kv, h};
    t[p + "self_attn.o_proj.weight"] = {h, q};
    if (c.attention_bias) {
      t[p + "self_attn.q_proj.bias"] = {q};
      t[p + "self_attn.k_proj.bias"] = {kv};
      t[p + "self_attn.v_proj.bias"] = {kv};
    }
    if (c.qk_norm) {
      t[p + "self_attn.q_norm.weight"] = {d};
      t[p + "self_attn.k_norm.weight"] = {d};
    }
    t[p + "mlp.gate_proj.weight"] = {i, h};
    t[p + "mlp.up_proj.weight"] = {i, h};
    t[p + "mlp.down_proj.weight"] = {h, i};
  }
  return t;
}

void expect_loads(const std::string& folder, const ModelConfig& c) {
  Checkpoint ckpt(folder);
  auto expected = expected_tensors(c);
  std::vector<std::string> names;
  for (const auto& [name, shape] : expected) {
    names.push_back(name);
    const SafetensorsTensor& t = ckpt.get(name, shape);
    EXPECT_EQ(t.dtype, DType::BF16) << name;
  }
  EXPECT_EQ(ckpt.names(), names);  // nothing else
}

struct Stats {
  double mean = 0, std = 0;
};
Stats stats(const SafetensorsTensor& t) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(t.data);
  double s = 0, s2 = 0;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double x = bf16_to_f32(p[i]);
    s += x;
    s2 += x * x;
  }
  return {s / double(n), std::sqrt(s2 / double(n) - (s / double(n)) * (s / double(n)))};
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST_F(MakeModelTest, TinyIsQwen3WithExplicitHeadDimAndTiedEmbeddings) {
  std::string folder = make({}, "tiny");
  ModelConfig c = load_model_config(folder);
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_NE(c.head_dim * c.num_attention_heads, c.hidden_size);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  expect_loads(folder, c);
  GenerationConfig g = load_generation_config(folder);
  ASSERT_FALSE(g.eos_token_ids.empty());
  for (int id : g.eos_token_ids) EXPECT_LT(id, c.vocab_size);
}

TEST_F(MakeModelTest, TinyQwen2HasBiasesAndUntiedHead) {
  MakeModelOptions o;
  o.preset = "tiny-qwen2";
  std::string folder = make(o, "q2");
  ModelConfig c = load_model_config(folder);
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 384);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  // Like real Qwen2 configs, head_dim is implied (hidden / heads), not written.
  EXPECT_FALSE(nlohmann::json::parse(read_all(folder + "/config.json")).contains("head_dim"));
  expect_loads(folder, c);
}

TEST_F(MakeModelTest, WeightScales) {
  MakeModelOptions o;
  o.hidden = 256;
  o.intermediate = 512;
  o.head_dim = 64;
  std::string folder = make(o, "scales");
  Checkpoint ckpt(folder);
  Stats e = stats(*ckpt.find("model.embed_tokens.weight"));
  EXPECT_NEAR(e.mean, 0, 0.01);
  EXPECT_NEAR(e.std, 1, 0.01);
  Stats q = stats(*ckpt.find("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_NEAR(q.std, 1 / 16.0, 0.002);  // 1 / sqrt(fan_in = 256)
  Stats down = stats(*ckpt.find("model.layers.1.mlp.down_proj.weight"));
  EXPECT_NEAR(down.std, 1 / std::sqrt(512.0), 0.002);
  Stats n = stats(*ckpt.find("model.layers.0.input_layernorm.weight"));
  EXPECT_NEAR(n.mean, 1, 0.03);
  EXPECT_NEAR(n.std, 0.1, 0.03);
  // Tied embeddings: the final norm has random signs (mean near 0, |w| near 1).
  Stats fn = stats(*ckpt.find("model.norm.weight"));
  EXPECT_NEAR(fn.mean, 0, 0.25);
  EXPECT_NEAR(fn.std, 1, 0.1);
}

TEST_F(MakeModelTest, DeterministicPerSeed) {
  MakeModelOptions o;
  o.seed = 7;
  std::string a = make(o, "a"), b = make(o, "b");
  o.seed = 8;
  std::string c = make(o, "c");
  const std::string wa = read_all(a + "/model.safetensors");
  EXPECT_EQ(wa, read_all(b + "/model.safetensors"));
  EXPECT_EQ(read_all(a + "/config.json"), read_all(b + "/config.json"));
  const std::string wc = read_all(c + "/model.safetensors");
  ASSERT_EQ(wa.size(), wc.size());
  EXPECT_NE(wa, wc);
  // Every tensor differs between seeds, not just some.
  Checkpoint ca(a), cc(c);
  for (const std::string& name : ca.names()) {
    const SafetensorsTensor* x = ca.find(name);
    EXPECT_NE(std::memcmp(x->data, cc.find(name)->data, x->nbytes), 0) << name;
  }
}

TEST_F(MakeModelTest, ShardedLoadsTheSameTensors) {
  MakeModelOptions o;
  o.preset = "tiny-qwen2";
  o.seed = 3;
  std::string single = make(o, "single");
  o.shards = 3;
  std::string sharded = make(o, "sharded");
  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(sharded + "/model.safetensors.index.json"));
  std::set<std::string> files;
  Checkpoint cs(single), ch(sharded);
  ModelConfig c = load_model_config(sharded);
  expect_loads(sharded, c);
  for (const std::string& name : cs.names()) {
    const SafetensorsTensor* x = cs.find(name);
    const SafetensorsTensor* y = ch.find(name);
    ASSERT_NE(y, nullptr) << name;
    ASSERT_EQ(x->nbytes, y->nbytes);
    EXPECT_EQ(std::memcmp(x->data, y->data, x->nbytes), 0) << name;
    files.insert(fs::path(ch.file_of(name)).filename().string());
  }
  EXPECT_EQ(files, (std::set<std::string>{"model-00001-of-00003.safetensors",
                                          "model-00002-of-00003.safetensors",
                                          "model-00003-of-00003.safetensors"}));
  // Writing a single file over a sharded folder removes the stale shards and index.
  o.shards = 1;
  make(o, "sharded");
  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(sharded + "/model-00001-of-00003.safetensors"));
  expect_loads(sharded, c);
}

TEST_F(MakeModelTest, Overrides) {
  MakeModelOptions o;
  o.layers = 3;
  o.hidden = 48;
  o.heads = 6;
  o.kv_heads = 3;
  o.head_dim = 8;
  o.intermediate = 40;
  o.vocab = 600;
  o.qkv_bias = true;
  o.tie_embeddings = false;
  std::string folder = make(o, "over");
  ModelConfig c = load_model_config(folder);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.hidden_size, 48);
  EXPECT_EQ(c.num_attention_heads, 6);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.intermediate_size, 40);
  EXPECT_EQ(c.vocab_size, 600);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  expect_loads(folder, c);

  MakeModelOptions q2;
  q2.architecture = "Qwen2ForCausalLM";  // tiny shapes as Qwen2: biases, no q/k norm
  c = load_model_config(make(q2, "arch"));
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  expect_loads(dir_ / "arch", c);
}

TEST_F(MakeModelTest, Errors) {
  auto expect_error = [&](MakeModelOptions o, const std::string& part) {
    o.out = (dir_ / "err").string();
    try {
      make_model(o);
      ADD_FAILURE() << "no error; expected " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  MakeModelOptions o;
  o.preset = "llama";
  expect_error(o, "unknown preset 'llama'");
  o = {};
  o.kv_heads = 3;
  expect_error(o, "config.json: field 'num_attention_heads' (4) must be a multiple");
  o = {};
  o.architecture = "GPT2";
  expect_error(o, "architecture 'GPT2' is not supported");
  o = {};
  o.preset = "qwen3-0.6b";
  o.vocab = 1000;
  expect_error(o, "'eos_token_id' holds 151645, outside the vocabulary of 1000");
  o = {};
  o.shards = 0;
  expect_error(o, "shards");
  EXPECT_FALSE(fs::exists(dir_ / "err" / "model.safetensors"));
}

TEST_F(MakeModelTest, Qwen3_0_6bConfigIsTheRealOne) {
  // One layer keeps this fast; every other field is the preset's.
  MakeModelOptions o;
  o.preset = "qwen3-0.6b";
  o.layers = 1;
  std::string folder = make(o, "q06");
  ModelConfig c = load_model_config(folder);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{151645});
  GenerationConfig g = load_generation_config(folder);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{151645, 151643}));
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  expect_loads(folder, c);
}

TEST_F(MakeModelTest, Llama32_1bConfigIsTheRealOne) {
  MakeModelOptions o;
  o.preset = "llama3-1b";
  o.layers = 1;
  std::string folder = make(o, "l1b");
  ModelConfig c = load_model_config(folder);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{128001});
  GenerationConfig g = load_generation_config(folder);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_FALSE(g.top_k.has_value());
  EXPECT_FLOAT_EQ(*g.top_p, 0.9f);
  expect_loads(folder, c);
}

TEST_F(MakeModelTest, TinyMistralHasItsWindowAndNoSampling) {
  MakeModelOptions o;
  o.preset = "tiny-mistral";
  std::string folder = make(o, "tm");
  ModelConfig c = load_model_config(folder);
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.sliding_window, 24);
  EXPECT_FALSE(c.tie_word_embeddings);
  GenerationConfig g = load_generation_config(folder);
  EXPECT_FALSE(g.temperature.has_value());
  EXPECT_FALSE(g.top_p.has_value());
  expect_loads(folder, c);
}

}  // namespace
}  // namespace nanovllm
