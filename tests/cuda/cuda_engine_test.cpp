// The whole engine on the GPU (--device cuda) on the tiny models: last-token logits near the
// fp32 reference forward, greedy tokens equal to it (genuine near-ties allowed, as the CPU tests
// do), CUDA graphs on vs off identical, and prefix caching / preemption / chunked prefill each
// still giving the reference's tokens. The same again with an fp8 (E4M3) KV cache, against the
// reference that rounds K/V to fp8 (ref::Precision::kBf16StorageFp8Kv), and its distance from
// the bf16 cache printed and bounded as the CPU's fp8 tests do. Weights quantized at load (int8,
// int4; the MoE presets' experts too) against the reference on the same quantized weights.
// Needs a GPU (label cuda).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <random>

#include "reference/reference_tokens.h"
#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/prompt_logprobs_check.h"
#include "reference/reference_model.h"

namespace nanovllm {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

Config cuda_config(const std::string& model) {
  Config c = test::tiny_config(model);
  c.device = "cuda";
  return c;
}

Prompts generate(const Config& config, const Prompts& prompts, const SamplingParams& sp,
                 int64_t* preemptions = nullptr) {
  LLM llm(config);
  Prompts ids;
  for (const GenerationOutput& o : llm.generate(prompts, {sp})) {
    EXPECT_EQ(o.finish_reason, "length") << o.error;
    ids.push_back(o.token_ids);
  }
  EXPECT_EQ(llm.engine().scheduler().block_manager().num_free_blocks(),
            llm.engine().model_runner().num_kv_blocks());
  if (preemptions) *preemptions = llm.engine().scheduler().num_preemptions();
  return ids;
}

SamplingParams greedy_params(int max_tokens) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  return sp;
}

// Four 40-token prompts sharing a 32-token prefix (two 16-token blocks), then `more`.
Prompts shared_prefix_prompts(int vocab, const Prompts& more) {
  Prompts prompts = test::random_prompts(4, vocab, 40, 40, 3);
  for (size_t i = 1; i < prompts.size(); ++i)
    std::copy(prompts[0].begin(), prompts[0].begin() + 32, prompts[i].begin());
  prompts.insert(prompts.end(), more.begin(), more.end());
  return prompts;
}

bool is_moe(const std::string& preset) {
  return preset == "qwen3-moe-tiny" || preset == "tiny-mixtral";
}

class CudaEngine : public ::testing::TestWithParam<std::string> {};

// bf16 activations: the error against the fp32 forward is bf16-sized (the CPU's f32 activations
// reach 1e-2 against fp32 and 1e-3 against the bf16-storage reference).
TEST_P(CudaEngine, LastTokenLogitsNearReference) {
  const std::string model = test::tiny_model(GetParam());
  ref::ReferenceModel reference(model);
  LLMEngine engine(cuda_config(model));
  EXPECT_NE(engine.backend().describe().find("cuda"), std::string::npos);
  for (const auto& prompt : test::random_prompts(4, reference.config().vocab_size, 1, 40, 7)) {
    const double err =
        test::relative_error(test::prefill_logits(engine, prompt), reference.last_logits(prompt));
    EXPECT_LT(err, 3e-2) << "prompt of " << prompt.size() << " tokens";
    std::printf("%s, %zu-token prompt: logit error / max |logit| = %.2e (fp32 reference)\n",
                GetParam().c_str(), prompt.size(), err);
  }
}

TEST_P(CudaEngine, GreedyTokensMatchReference) {
  const std::string model = test::tiny_model(GetParam());
  ref::ReferenceModel reference(model, ref::Precision::kBf16Storage);
  const Prompts prompts = test::random_prompts(12, reference.config().vocab_size, 1, 48, 11);
  // Random weights tie often: every divergence must be at a reference near-tie (the real check);
  // how many prompts run 32 tokens without meeting one varies by machine (tiny-qwen2 under the
  // emulator: 8 of 12 where it was first measured, 5 of 12 on a 2-core Zen 3, every divergence at
  // a reference gap under 3e-2).
  test::expect_reference_tokens(generate(cuda_config(model), prompts, greedy_params(32)), prompts,
                                reference, 32, 3e-2, 4, "cuda greedy");
}

// SamplingParams::prompt_logprobs on the GPU: every prompt token's logprob near the bf16-storage
// reference (bf16 activations: the bound of LastTokenLogitsNearReference), also with chunked
// prefill (16-token steps).
TEST_P(CudaEngine, PromptLogprobsNearReference) {
  const std::string model = test::tiny_model(GetParam());
  ref::ReferenceModel reference(model, ref::Precision::kBf16Storage);
  const Prompts prompts = test::random_prompts(4, reference.config().vocab_size, 2, 40, 5);
  Config chunked = cuda_config(model);
  chunked.max_num_batched_tokens = 16;
  for (const Config& c : {cuda_config(model), chunked}) {
    LLM llm(c);
    SamplingParams sp = greedy_params(1);
    sp.prompt_logprobs = 2;
    const double worst = test::check_prompt_logprobs(llm.generate(prompts, {sp}), prompts, reference, 2, 3e-2);
    std::printf("%s: largest prompt logprob error / max |logit| = %.2e\n", GetParam().c_str(), worst);
  }
}

// Graphs on vs off: the same tokens, greedy and seeded sampling (decode batches padded to a
// bucket compute every real row exactly as the eager step does).
TEST_P(CudaEngine, GraphsOnEqualsOff) {
  const std::string model = test::tiny_model(GetParam());
  const Prompts prompts = test::random_prompts(11, test::vocab_size(model), 1, 40, 5);
  Config eager = cuda_config(model), graphs = eager;
  eager.enforce_eager = true;
  graphs.enforce_eager = false;
  EXPECT_EQ(generate(graphs, prompts, greedy_params(24)),
            generate(eager, prompts, greedy_params(24)));
  SamplingParams sp = greedy_params(24);
  sp.temperature = 0.8f;
  sp.seed = 77;
  EXPECT_EQ(generate(graphs, prompts, sp), generate(eager, prompts, sp));
}

// Prefix caching, preemption (a cache of 12 blocks) and chunked prefill (32-token steps) each
// still give the reference's greedy tokens: every prompt follows the reference up to a near-tie,
// and most match in full. MoE routers add their own near-ties (an expert picked on a rounding):
// on an H200, qwen3-moe-tiny matched 5 of 10 (cuBLASLt rounds differently from the emulator,
// which matched 7), every other prompt leaving the reference at a near-tie; 4 there.
TEST_P(CudaEngine, PrefixCachePreemptionChunkedPrefill) {
  const std::string model = test::tiny_model(GetParam());
  ref::ReferenceModel reference(model, ref::Precision::kBf16Storage);
  const Prompts prompts = shared_prefix_prompts(
      reference.config().vocab_size, test::random_prompts(6, reference.config().vocab_size, 50, 90, 4));
  const Config base = cuda_config(model);
  Config off = base, small = base, chunked = base;
  off.enable_prefix_caching = false;
  small.kv_cache_memory = 12 * test::kv_block_bytes(model, base.block_size);
  small.max_model_len = 12 * 16 + 1;  // what 12 blocks hold (a longer one is refused)
  chunked.max_num_batched_tokens = 32;
  const SamplingParams sp = greedy_params(24);
  const size_t min_identical = is_moe(GetParam()) ? 4 : 6;
  test::expect_reference_tokens(generate(base, prompts, sp), prompts, reference, 24, 3e-2,
                                min_identical, "prefix cache on");
  test::expect_reference_tokens(generate(off, prompts, sp), prompts, reference, 24, 3e-2,
                                min_identical, "prefix cache off");
  int64_t preemptions = 0;
  test::expect_reference_tokens(generate(small, prompts, sp, &preemptions), prompts, reference, 24,
                                3e-2, min_identical, "preemption");
  EXPECT_GT(preemptions, 0) << "12 blocks should have forced a preemption";
  test::expect_reference_tokens(generate(chunked, prompts, sp), prompts, reference, 24, 3e-2,
                                min_identical, "chunked prefill");
}

Config fp8(Config c) {
  c.kv_cache_dtype = "fp8";
  return c;
}

// The fp8 engine's greedy tokens against the fp8-KV reference, with every engine feature: graphs
// on and off (identical), prefix caching, preemption and chunked prefill.
TEST_P(CudaEngine, Fp8KvMatchesFp8ReferenceWithEveryFeature) {
  const std::string model = test::tiny_model(GetParam());
  ref::ReferenceModel reference(model, ref::Precision::kBf16StorageFp8Kv);
  const Prompts prompts = shared_prefix_prompts(
      reference.config().vocab_size, test::random_prompts(8, reference.config().vocab_size, 1, 90, 4));
  const Config base = fp8(cuda_config(model));
  Config eager = base, off = base, small = base, chunked = base;
  eager.enforce_eager = true;
  off.enable_prefix_caching = false;
  small.kv_cache_memory = 12 * test::kv_block_bytes(model, base.block_size) / 2;  // 12 fp8 blocks
  small.max_model_len = 12 * 16 + 1;
  chunked.max_num_batched_tokens = 32;
  const SamplingParams sp = greedy_params(24);
  // E4M3 keys and values leave more near-ties than bf16: every prompt must follow the reference
  // up to one, and half must match in full (measured: tiny 9, tiny-qwen2 8 on an H200; tiny-llama
  // 7 under the emulator, of 12). MoE routers add their own near-ties (an expert picked on a
  // rounding): a third there (measured under the emulator: qwen3-moe-tiny 6, tiny-mixtral 5).
  // tiny-mistral's 24-token sliding window weighs each key more, so one key's E4M3 rounding
  // moves the logits more: a third as well (measured under the emulator: 4, the other 8 leaving
  // at gaps of 0.03-0.9% of the largest logit).
  const size_t min_identical = is_moe(GetParam()) || GetParam() == "tiny-mistral" ? 4 : 6;
  const Prompts with_graphs = generate(base, prompts, sp);
  test::expect_reference_tokens(with_graphs, prompts, reference, 24, 3e-2, min_identical,
                                "fp8 KV, graphs");
  EXPECT_EQ(generate(eager, prompts, sp), with_graphs) << "fp8 KV: graphs on vs off";
  test::expect_reference_tokens(generate(off, prompts, sp), prompts, reference, 24, 3e-2,
                                min_identical, "fp8 KV, prefix cache off");
  int64_t preemptions = 0;
  test::expect_reference_tokens(generate(small, prompts, sp, &preemptions), prompts, reference, 24,
                                3e-2, min_identical, "fp8 KV, preemption");
  // tiny-mistral frees the blocks that slid out of its 24-token window, so 12 blocks hold its
  // prompts without a preemption (LlamaFamily.SlidingWindowFreesTheBlocksThatSlidOut).
  if (GetParam() != "tiny-mistral") {
    EXPECT_GT(preemptions, 0) << "12 fp8 blocks should have forced a preemption";
  }
  test::expect_reference_tokens(generate(chunked, prompts, sp), prompts, reference, 24, 3e-2,
                                min_identical, "fp8 KV, chunked prefill");
}

// fp8 against bf16 on the GPU: the largest last-token logit difference and the greedy agreement
// (tokens before each sequence's first difference), printed and bounded as the CPU test does;
// and the same bytes hold twice the blocks.
void expect_fp8_near_bf16(const std::string& model, const Config& base, const char* name) {
  const Prompts prompts = test::random_prompts(6, test::vocab_size(model), 20, 60, 321);
  const double agreement = test::leading_agreement(generate(fp8(base), prompts, greedy_params(24)),
                                                   generate(base, prompts, greedy_params(24)));
  LLMEngine bf16_engine(base), fp8_engine(fp8(base));
  EXPECT_EQ(fp8_engine.model_runner().kv_block_bytes() * 2,
            bf16_engine.model_runner().kv_block_bytes());
  const auto [max_diff, range] = test::logit_gap(fp8_engine, bf16_engine, prompts);
  std::printf(
      "[cuda fp8 vs bf16 KV] %s: greedy agreement %.1f%%, max |logit diff| %.4f (max "
      "|logit| %.3f, %.2f%%)\n",
      name, 100 * agreement, max_diff, range, 100 * max_diff / range);
  EXPECT_GT(max_diff, 0.0) << name << ": fp8 changed nothing: is the cache really fp8?";
  EXPECT_LT(max_diff, 0.05 * range) << name;
  EXPECT_GE(agreement, 0.5) << name;
}

TEST_P(CudaEngine, Fp8KvNearBf16) {
  const std::string model = test::tiny_model(GetParam());
  Config c = cuda_config(model);
  c.kv_cache_memory = 64 << 20;
  expect_fp8_near_bf16(model, c, GetParam().c_str());
}

// Qwen3-0.6B's attention shapes (head_dim 128, 16 query / 8 kv heads), 2 layers.
TEST(CudaFp8Kv, Qwen3ShapesNearBf16) {
  const std::string model = test::qwen3_shaped_model("cuda-fp8-qwen3-2l");
  Config c = cuda_config(model);
  c.kv_cache_memory = 64 << 20;
  expect_fp8_near_bf16(model, c, "qwen3-0.6b shapes, 2 layers");
}

// Weights quantized at load (Config::quantization) on the GPU: greedy tokens against the
// reference forward on the same quantized weights (quantize_rtn's codes dequantized; the table
// int8 for int4 as the loader keeps it), near-ties allowed as in GreedyTokensMatchReference (bf16
// activations; the reference reads GEMM inputs on the quantized CPU GEMM's int16 grid), and
// graphs on vs off identical (the W8A16 / W4A16 GEMV captured for decode).
struct QuantCase {
  const char* preset;
  const char* quantization;
};

void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.preset << " " << c.quantization; }

class CudaQuantizedEngine : public ::testing::TestWithParam<QuantCase> {};

TEST_P(CudaQuantizedEngine, GreedyMatchesTheQuantizedReference) {
  const std::string model = test::tiny_model(GetParam().preset);
  const QuantScheme scheme = parse_quantization(GetParam().quantization);
  ref::ReferenceModel reference(model, ref::Precision::kBf16Storage, scheme);
  const Prompts prompts = test::random_prompts(8, reference.config().vocab_size, 1, 40, 11);
  Config graphs = cuda_config(model);
  graphs.quantization = GetParam().quantization;
  Config eager = graphs;
  eager.enforce_eager = true;
  const std::string what = std::string("cuda ") + GetParam().preset + " " + GetParam().quantization;
  {
    // Last-token logits within LastTokenLogitsNearReference's bound of the quantized reference;
    // the unquantized one's distance printed for scale.
    ref::ReferenceModel unquantized(model);
    LLMEngine engine(graphs);
    for (const auto& prompt : test::random_prompts(3, reference.config().vocab_size, 1, 40, 7)) {
      const std::vector<float> logits = test::prefill_logits(engine, prompt);
      const double err = test::relative_error(logits, reference.last_logits(prompt));
      EXPECT_LT(err, 3e-2) << what << ", prompt of " << prompt.size() << " tokens";
      std::printf("%s, %zu-token prompt: logit error / max |logit| = %.2e (quantized reference), "
                  "%.2e (unquantized fp32 reference)\n",
                  what.c_str(), prompt.size(), err,
                  test::relative_error(logits, unquantized.last_logits(prompt)));
    }
  }
  const Prompts got = generate(graphs, prompts, greedy_params(16));
  test::expect_reference_tokens(got, prompts, reference, 16, 3e-2, 4, what.c_str());
  EXPECT_EQ(generate(eager, prompts, greedy_params(16)), got) << what << ": graphs on vs off";
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, CudaQuantizedEngine,
    ::testing::Values(QuantCase{"tiny", "int8"}, QuantCase{"tiny", "int4-g32"},
                      QuantCase{"tiny-qwen2", "int8"}),
    [](const ::testing::TestParamInfo<QuantCase>& info) {
      std::string s = std::string(info.param.preset) + "_" + info.param.quantization;
      for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return s;
    });

// Quantized experts (CudaBackend::fused_moe's int8 / int4 grouped GEMV and tiled GEMM): the
// same checks on the MoE presets, Qwen3-MoE's 16 experts top 4 and Mixtral's 8 top 2 (10 to 16 s
// each emulated; the name starts with TinyShapes so the ASan preset leaves them out, as it does
// the bf16 MoE suites).
INSTANTIATE_TEST_SUITE_P(
    TinyShapesMoeQuantized, CudaQuantizedEngine,
    ::testing::Values(QuantCase{"qwen3-moe-tiny", "int8"}, QuantCase{"qwen3-moe-tiny", "int4-g32"},
                      QuantCase{"tiny-mixtral", "int8"}),
    [](const ::testing::TestParamInfo<QuantCase>& info) {
      std::string s = std::string(info.param.preset) + "_" + info.param.quantization;
      for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return s;
    });

INSTANTIATE_TEST_SUITE_P(TinyShapes, CudaEngine,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-llama", "tiny-mistral"));
// Sparse MoE layers (CudaBackend::fused_moe): Qwen3-MoE's 16 experts, top 4, with a dense middle
// layer, and Mixtral's 8, top 2. Under the emulator (tests/cuda_emu/cuda_emu.cmake) their
// prefix-cache and fp8 suites are labelled heavy (minutes); the name starts with TinyShapes so
// the ASan preset leaves them all out, as it does the others.
INSTANTIATE_TEST_SUITE_P(TinyShapesMoe, CudaEngine,
                         ::testing::Values("qwen3-moe-tiny", "tiny-mixtral"));

}  // namespace
}  // namespace nanovllm
