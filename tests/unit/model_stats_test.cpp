// The bench's napkin math (model/model_stats.h) against counting it out token by token.
#include "model/model_stats.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace nanovllm {
namespace {

ModelConfig qwen3_06b() {
  ModelConfig c;
  c.hidden_size = 1024;
  c.intermediate_size = 3072;
  c.num_hidden_layers = 28;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 151936;
  return c;
}

TEST(ModelStats, Qwen3_06bFigures) {
  const ModelConfig c = qwen3_06b();
  // q 2048, k/v 1024 each, o 2048 x 1024, gate/up/down 3 x 3072 x 1024, per layer
  EXPECT_EQ(decoder_linear_params(c), 28LL * ((2048 + 2048) * 1024 + 1024 * 2048 + 3 * 3072 * 1024));
  EXPECT_EQ(kv_bytes_per_token(c, 2), 2LL * 28 * 8 * 128 * 2);  // 114688
  // 0.596 GB of weights + 0.311 GB of lm_head, in bf16: ~1.19 GB per decode step
  EXPECT_NEAR(double(weight_bytes_per_decode_step(c)) / 1e9, 1.192, 0.002);
  // int8 linears (1 byte + a 4-byte scale per row) and table: about half.
  const QuantScheme int8{QuantFormat::Int8, 0}, int4{QuantFormat::Int4, 64};
  const double linears = double(decoder_linear_params(c)), table = 151936.0 * 1024;
  const double norms = 2.0 * (28 * (2 * 1024 + 2 * 128) + 1024);
  EXPECT_NEAR(double(weight_bytes_per_decode_step(c, int8, int8)), linears + table + norms, 0.01 * linears);
  // int4-g64: 4 bits + an f16 scale and min per 64 = 4.5 bits a weight; the table int8.
  EXPECT_NEAR(double(weight_bytes_per_decode_step(c, int4, int8)), linears * 0.5625 + table + norms,
              1e6);
}

TEST(ModelStats, MixtureOfExpertsCountsTheActiveExperts) {
  ModelConfig c = qwen3_06b();  // Qwen3-30B-A3B's layer shapes, 2 layers
  c.hidden_size = 2048, c.num_hidden_layers = 2, c.num_attention_heads = 32, c.num_key_value_heads = 4;
  c.intermediate_size = 6144, c.num_experts = 128, c.num_experts_per_tok = 8, c.moe_intermediate_size = 768;
  const int64_t attn = (4096 + 2 * 512) * 2048 + 2048 * 4096, router = 128 * 2048;
  const int64_t expert = 3 * 768 * 2048;
  EXPECT_EQ(decoder_linear_params(c), 2 * (attn + router + 8 * expert));
  const double lm_head = 151936.0 * 2048 * 2, norms = 2.0 * (2 * (2 * 2048 + 2 * 128) + 2048);
  // One token reads its 8 experts; 16 tokens 128 (1 - (15/16)^16) = 82.4 of them in expectation.
  EXPECT_NEAR(double(weight_bytes_per_decode_step(c)), 2 * 2.0 * (attn + router + 8 * expert) + lm_head + norms, 1);
  EXPECT_NEAR(expected_active_experts(c, 16), 82.42, 0.01);
  EXPECT_NEAR(double(weight_bytes_per_decode_step(c, {}, {}, 16)),
              2 * 2.0 * (attn + router + 82.4225 * expert) + lm_head + norms, 2e5);
  EXPECT_NEAR(expected_active_experts(c, 1e6), 128, 1e-9);
  // The experts' share of those bytes and of a token's parameters (the serial bound's split).
  EXPECT_NEAR(expert_bytes_per_decode_step(c, {}, 16), 2 * 2.0 * 82.4225 * expert, 2e5);
  EXPECT_EQ(expert_params_per_token(c), 2 * 8 * expert);
  EXPECT_EQ(expert_params_per_token(qwen3_06b()), 0);
  EXPECT_EQ(expert_bytes_per_decode_step(qwen3_06b(), {}, 16), 0.0);
}

// Every query's keys counted one by one, with no window and under sliding windows (Mistral:
// a query sees at most `window` keys).
class PhaseWorkTest : public ::testing::TestWithParam<int> {};

TEST_P(PhaseWorkTest, CountsEveryToken) {
  ModelConfig c = qwen3_06b();
  c.sliding_window = GetParam();
  auto seen = [&](int keys) {
    return c.sliding_window > 0 ? std::min(keys, c.sliding_window) : keys;
  };
  const std::vector<int> prompt = {5, 128, 1}, output = {3, 128, 1};
  const PhaseWork w = phase_work(c, prompt, output, 2);
  double prefill = 0, decode = 0, kv = 0, tokens = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    for (int t = 0; t < prompt[i]; ++t)
      prefill += matmul_flops_per_token(c) + attention_flops(c, seen(t + 1));
    prefill += lm_head_flops(c);
    for (int j = 1; j < output[i]; ++j) {  // the token at position prompt + j - 1
      const int keys = seen(prompt[i] + j);
      decode += matmul_flops_per_token(c) + lm_head_flops(c) + attention_flops(c, keys);
      kv += double(keys) * double(kv_bytes_per_token(c, 2));
      tokens += 1;
    }
  }
  EXPECT_DOUBLE_EQ(w.prefill_flops, prefill);
  EXPECT_DOUBLE_EQ(w.decode_flops, decode);
  EXPECT_DOUBLE_EQ(w.decode_kv_bytes, kv);
  double attention = 0;
  for (size_t i = 0; i < prompt.size(); ++i)
    for (int j = 1; j < output[i]; ++j) attention += attention_flops(c, seen(prompt[i] + j));
  EXPECT_DOUBLE_EQ(w.decode_attention_flops, attention);
  EXPECT_DOUBLE_EQ(w.decode_tokens, tokens);
  EXPECT_DOUBLE_EQ(w.decode_tokens, 2 + 127);
}

INSTANTIATE_TEST_SUITE_P(Windows, PhaseWorkTest, ::testing::Values(0, 1, 4, 100, 200, 1000));

// A window on some layers only (Qwen2 / Qwen3 under use_sliding_window): each layer's keys
// counted on its own.
TEST(ModelStats, PhaseWorkCountsPartlyWindowedLayers) {
  ModelConfig c = qwen3_06b();  // 28 layers
  c.sliding_window = 50;
  for (int l = 0; l < 21; ++l) c.full_attention_layers.push_back(l);
  const std::vector<int> prompt = {300}, output = {20};
  const PhaseWork w = phase_work(c, prompt, output, 2);
  double prefill_keys = 0, decode_keys = 0;  // summed over layers
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const int window = c.layer_sliding_window(l);
    auto seen = [&](int keys) { return window > 0 ? std::min(keys, window) : keys; };
    for (int t = 0; t < 300; ++t) prefill_keys += seen(t + 1);
    for (int j = 1; j < 20; ++j) decode_keys += seen(300 + j);
  }
  const double per_layer = attention_flops(c, 1) / c.num_hidden_layers;  // a key, a layer
  EXPECT_NEAR(w.decode_attention_flops, per_layer * decode_keys, 1e-6 * w.decode_attention_flops);
  EXPECT_NEAR(w.prefill_flops,
              300 * matmul_flops_per_token(c) + per_layer * prefill_keys + lm_head_flops(c),
              1e-9 * w.prefill_flops);
  EXPECT_NEAR(w.decode_kv_bytes,
              decode_keys / c.num_hidden_layers * double(kv_bytes_per_token(c, 2)),
              1e-9 * w.decode_kv_bytes);
}

}  // namespace
}  // namespace nanovllm
