// What the Llama family adds to the Qwen decoder, through the whole engine: llama3 RoPE scaling
// (and yarn, Qwen's own long-context scaling) reaches the output (and the reference forward,
// written from transformers' own formula, agrees at positions where the scaled frequencies have
// turned far), Mistral's sliding window (and Qwen2's, on some layers) matches the reference past
// the window, and text prompts get the BOS (Llama 3's tokenizer, and Llama 2's SentencePiece-style
// one on a Mistral model). The shared paths (logits, greedy tokens, prefix cache, preemption,
// chunked prefill, TP, the CUDA emulator) run the tiny-llama and tiny-mistral presets in their own
// suites.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "model/make_model.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/reference_model.h"
#include "reference/test_util.h"
#include "util/check.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

// A prompt long enough that llama3's scaled low frequencies have turned by whole radians.
std::vector<int32_t> long_prompt(int vocab) { return test::random_prompts(1, vocab, 400, 400, 11)[0]; }

TEST(LlamaFamily, Llama3RopeScalingReachesTheOutput) {
  const std::string model = test::tiny_model("tiny-llama");
  const std::string plain = test::with_config_field(model, "rope_scaling", nullptr, "plain");
  const std::string linear =
      test::with_config_field(model, "rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}, "linear");
  const std::vector<int32_t> prompt = long_prompt(test::vocab_size(model));
  std::map<std::string, std::vector<float>> got;
  for (const std::string& m : {model, plain, linear}) {
    LLMEngine engine(test::tiny_config(m));
    got[m] = test::prefill_logits(engine, prompt);
    // Each scaling against the reference forward on its own config (bf16 storage: the same
    // rounding points, so only summation order and rare rounding flips differ).
    const ref::ReferenceModel reference(m, ref::Precision::kBf16Storage);
    const double err = test::relative_error(got[m], reference.last_logits(prompt));
    EXPECT_LT(err, 5e-3) << m;
    std::printf("%s: logit error / max |logit| against the reference %.2e\n",
                fs::path(m).filename().c_str(), err);
  }
  // The scalings change the logits by far more than the engine's error.
  const double llama3_vs_plain = test::relative_error(got[model], got[plain]);
  const double linear_vs_plain = test::relative_error(got[linear], got[plain]);
  std::printf("logit change / max |logit| from the scaling: llama3 %.2e, linear %.2e\n",
              llama3_vs_plain, linear_vs_plain);
  EXPECT_GT(llama3_vs_plain, 1e-2);  // measured 2.1e-2: llama3 turns only the low frequencies
  EXPECT_GT(linear_vs_plain, 1e-2);  // measured 1.7e-1
}

// YaRN (Qwen3's documented way to a 131,072-token context) on the tiny Qwen3 preset with an
// original context of 64 positions, so a 400-token prompt runs far past it: the engine's logits
// against the reference forward (transformers' _compute_yarn_parameters, its attention factor on
// cos and sin) for the default attention factor, an explicit one with truncate off, and
// DeepSeek's mscale ratio; each differs from RoPE without scaling and from the others.
TEST(RopeScaling, YarnMatchesTheReference) {
  const std::string model = test::tiny_model("tiny");
  const nlohmann::json base = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  nlohmann::json explicit_factor = base, mscale = base;
  explicit_factor.update({{"attention_factor", 1.0}, {"truncate", false}, {"beta_fast", 8.0}});
  mscale.update({{"mscale", 1.0}, {"mscale_all_dim", 0.5}});
  const std::vector<std::string> folders = {
      test::with_config_field(model, "rope_scaling", nullptr, "plain"),
      test::with_config_field(model, "rope_scaling", base, "yarn"),
      test::with_config_field(model, "rope_scaling", explicit_factor, "yarn-af1"),
      test::with_config_field(model, "rope_scaling", mscale, "yarn-mscale")};
  const std::vector<int32_t> prompt = long_prompt(test::vocab_size(model));
  std::vector<std::vector<float>> got;
  for (const std::string& m : folders) {
    LLMEngine engine(test::tiny_config(m));
    got.push_back(test::prefill_logits(engine, prompt));
    const ref::ReferenceModel reference(m, ref::Precision::kBf16Storage);
    const double err = test::relative_error(got.back(), reference.last_logits(prompt));
    std::printf("%s: logit error / max |logit| against the reference %.2e\n",
                fs::path(m).filename().c_str(), err);
    EXPECT_LT(err, 5e-3) << m;
  }
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t k = i + 1; k < got.size(); ++k) {
      const double change = test::relative_error(got[i], got[k]);
      std::printf("change / max |logit| between %zu and %zu: %.2e\n", i, k, change);
      EXPECT_GT(change, 1e-2) << i << " " << k;
    }
}

// yarn lets max_model_len reach original_max_position_embeddings x factor (vLLM's derived
// length) where that exceeds max_position_embeddings; without it the latter caps the request.
TEST(RopeScaling, YarnExtendsTheContextLimit) {
  const std::string model = test::tiny_model("tiny");
  const std::string short_ctx =
      test::with_config_field(model, "max_position_embeddings", 128, "pos128");
  const std::string yarn = test::with_config_field(
      short_ctx, "rope_scaling",
      {{"rope_type", "yarn"}, {"factor", 3.0}, {"original_max_position_embeddings", 128}}, "yarn");
  Config c = test::tiny_config(short_ctx);
  c.max_model_len = 512;
  EXPECT_EQ(LLMEngine(c).config().max_model_len, 128);
  c.model = yarn;
  LLMEngine engine(c);
  EXPECT_EQ(engine.config().max_model_len, 384);
  // A 300-token prompt runs past the pretrained 128 positions and matches the reference there.
  const std::vector<int32_t> prompt =
      test::random_prompts(1, test::vocab_size(model), 300, 300, 5)[0];
  const ref::ReferenceModel reference(yarn, ref::Precision::kBf16Storage);
  EXPECT_LT(
      test::relative_error(test::prefill_logits(engine, prompt), reference.last_logits(prompt)),
      5e-3);
}

// A windowed model's last-token logits (got) against the reference forward on its own folder
// (bf16 storage: only summation order and rare rounding flips differ), and far from the logits
// without the window (plain).
void expect_window_matches_reference(const std::string& what, const std::string& windowed,
                                     const std::vector<int32_t>& prompt,
                                     const std::vector<float>& got,
                                     const std::vector<float>& plain) {
  const ref::ReferenceModel reference(windowed, ref::Precision::kBf16Storage);
  const double err = test::relative_error(got, reference.last_logits(prompt));
  const double change = test::relative_error(got, plain);
  std::printf("%s: error / max |logit| against the reference %.2e; change from the window %.2e\n",
              what.c_str(), err, change);
  EXPECT_LT(err, 5e-3) << what;
  EXPECT_GT(change, 1e-2) << what;
}

// Mistral's sliding window (tiny-mistral's is 24 tokens) on a 100-token prompt: the engine's
// logits against the reference forward with the window (transformers' sliding_window_overlay),
// the window visibly changes them, and a window longer than the context changes no bit. Greedy
// tokens past the window, prefix caching, preemption, chunked prefill and TP run the same preset
// in their own suites.
TEST(LlamaFamily, SlidingWindowMatchesTheReference) {
  const std::string model = test::tiny_model("tiny-mistral");
  ASSERT_EQ(load_model_config(model).sliding_window, 24);
  const std::string none = test::with_config_field(model, "sliding_window", nullptr, "nowindow");
  const std::string wide = test::with_config_field(model, "sliding_window", 4096, "wide");
  const std::vector<int32_t> prompt =
      test::random_prompts(1, test::vocab_size(model), 100, 100, 5)[0];
  std::map<std::string, std::vector<float>> got;
  for (const std::string& m : {model, none, wide}) {
    Config c = test::tiny_config(m);
    c.max_model_len = 4096;       // above the window: accepted
    c.kv_cache_memory = 8 << 20;  // one sequence of 4096 tokens
    LLMEngine engine(c);
    got[m] = test::prefill_logits(engine, prompt);
  }
  expect_window_matches_reference("tiny-mistral, window 24, 100 tokens", model, prompt, got[model],
                                  got[none]);
  EXPECT_EQ(got[wide], got[none]);  // a window past the context is no window, bit for bit
}

// Decode frees the KV blocks that slid out of Mistral's window: three 20-token prompts that
// generate 100 tokens each (8 blocks of 16 apiece, 24 in all) run in 14 blocks without a
// preemption, and their greedy tokens equal those of a cache that holds them all.
TEST(LlamaFamily, SlidingWindowFreesTheBlocksThatSlidOut) {
  const std::string model = test::tiny_model("tiny-mistral");  // window 24
  const auto prompts = test::random_prompts(3, test::vocab_size(model), 20, 20, 9);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 100;
  sp.ignore_eos = true;
  auto run = [&](int64_t blocks, int64_t* preemptions) {
    Config c = test::tiny_config(model);
    c.kv_cache_memory = blocks * test::kv_block_bytes(model, c.block_size);
    c.max_model_len = 121;  // 20 + 100 tokens fit (the engine checks one max_model_len sequence)
    LLM llm(c);
    EXPECT_EQ(llm.engine().model_runner().num_kv_blocks(), blocks);
    std::vector<std::vector<int32_t>> ids;
    for (const GenerationOutput& o : llm.generate(prompts, {sp})) ids.push_back(o.token_ids);
    *preemptions = llm.engine().scheduler().num_preemptions();
    return ids;
  };
  int64_t roomy_preemptions = 0, tight_preemptions = 0;
  const auto roomy = run(64, &roomy_preemptions);
  const auto tight = run(14, &tight_preemptions);
  EXPECT_EQ(tight, roomy);
  EXPECT_EQ(roomy_preemptions, 0);
  EXPECT_EQ(tight_preemptions, 0) << "14 blocks hold three windows of 24 tokens";
}

// Qwen2 under use_sliding_window (tiny-qwen2's 2 layers, max_window_layers 1: layer 1 attends
// within 8 keys, layer 0 to all): the engine against the reference forward on the same config,
// and the window visibly changes the logits.
TEST(LlamaFamily, QwenSlidingWindowOnLaterLayers) {
  const std::string model = test::tiny_model("tiny-qwen2");
  const std::string windowed = test::with_config_field(
      test::with_config_field(test::with_config_field(model, "use_sliding_window", true, "usw"),
                              "sliding_window", 8, "w8"),
      "max_window_layers", 1, "mwl1");
  const ModelConfig c = load_model_config(windowed);
  ASSERT_EQ(c.layer_sliding_window(0), 0);
  ASSERT_EQ(c.layer_sliding_window(1), 8);
  const std::vector<int32_t> prompt = test::random_prompts(1, c.vocab_size, 60, 60, 6)[0];
  LLMEngine plain_engine(test::tiny_config(model)), windowed_engine(test::tiny_config(windowed));
  const std::vector<float> plain = test::prefill_logits(plain_engine, prompt);
  const std::vector<float> got = test::prefill_logits(windowed_engine, prompt);
  expect_window_matches_reference("tiny-qwen2, window 8 on layer 1, 60 tokens", windowed, prompt,
                                  got, plain);
}

// A raw text prompt gets the tokenizer's post-processor tokens (Llama 3's <|begin_of_text|>,
// Llama 2 / Mistral's <s>), as nano-vllm's tokenizer.encode(prompt) and vLLM give them; ids given
// as ids are left alone.
void expect_text_prompt_gets_bos(const std::string& preset, const std::string& package, int vocab,
                                 int32_t bos) {
  const fs::path tok = fs::path(test::source_dir()) / "node_modules/@lenml" / package / "models";
  ASSERT_TRUE(fs::exists(tok / "tokenizer.json")) << tok << " missing: run scripts/install_deps.sh";
  const fs::path dir = fs::temp_directory_path() /
                       ("nanovllm-" + package + "-" + std::to_string(::getpid()));
  test::remove_at_exit(dir);
  MakeModelOptions o;
  o.preset = preset;
  o.vocab = vocab;
  o.out = dir.string();
  o.tokenizer = tok.string();
  make_model(o);
  LLM llm(test::tiny_config(dir.string()));
  const Tokenizer& t = llm.engine().require_tokenizer();
  const std::string text = "The quick brown fox";
  std::vector<int32_t> bare = t.encode(text), with_bos = bare;
  with_bos.insert(with_bos.begin(), bos);
  EXPECT_EQ(t.encode_with_special_tokens(text), with_bos) << package;
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  const std::vector<int32_t> from_text = llm.generate(std::vector<std::string>{text}, {sp})[0].token_ids;
  EXPECT_EQ(from_text, llm.generate(std::vector<std::vector<int32_t>>{with_bos}, {sp})[0].token_ids)
      << package;
  EXPECT_NE(from_text, llm.generate(std::vector<std::vector<int32_t>>{bare}, {sp})[0].token_ids)
      << package << ": the BOS should change a random model's continuation";
}

TEST(LlamaFamily, TextPromptsGetTheBos) {
  expect_text_prompt_gets_bos("tiny-llama", "tokenizer-llama3_1", 128256, 128000);
  expect_text_prompt_gets_bos("tiny-mistral", "tokenizer-llama2", 32000, 1);
}

}  // namespace
}  // namespace nanovllm
