// The trained default model (models/default, made by training/) against torch: the training script
// wrote, for the first 512 tokens of held-out text (Moby Dick), torch's fp32 per-token logprobs on
// the bf16-rounded weights (reference_logprobs.json). The engine's prompt logprobs and `nanovllm
// perplexity` must agree with them; an fp8 KV cache must stay close to bf16 (KL divergence).
// Bad input to `nanovllm perplexity` gets a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/cli_runner.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

std::string default_model() { return test::source_dir() + "/models/default"; }

struct Reference {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;  // [i]: log p(ids[i] | ids[:i]); [0] unused
  std::vector<int32_t> top1;     // [i]: the most likely token after ids[:i+1]
};

Reference load_reference() {
  std::ifstream in(default_model() + "/reference_logprobs.json");
  EXPECT_TRUE(in) << "models/default/reference_logprobs.json is missing (training/evaluate.py writes it)";
  Reference r;
  if (!in) return r;
  const nlohmann::json j = nlohmann::json::parse(in);
  r.ids = j["ids"].get<std::vector<int32_t>>();
  for (const auto& v : j["token_logprobs"]) r.logprobs.push_back(v.is_null() ? 0.0 : v.get<double>());
  for (const auto& t : j["top5"]) r.top1.push_back(t[0][0].get<int32_t>());
  return r;
}

Config default_config(const std::string& kv_dtype = "auto") {
  Config c;
  c.model = default_model();
  c.max_model_len = 1024;
  c.kv_cache_memory = 64 << 20;
  c.kv_cache_dtype = kv_dtype;
  c.num_threads = 2;
  c.show_progress = false;
  return c;
}

TEST(DefaultModel, PromptLogprobsMatchTorch) {
  const Reference ref = load_reference();
  ASSERT_EQ(ref.ids.size(), 512u);
  LLM llm(default_config());
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 1;
  sp.prompt_logprobs = 1;
  const std::vector<StepLogprobs> got = llm.generate(std::vector<std::vector<int32_t>>{ref.ids}, {sp})[0].prompt_logprobs;
  ASSERT_EQ(got.size(), ref.ids.size() - 1);
  // The engine keeps K/V in bf16 (torch's reference does not round them): errors of ~3e-3 on
  // average, 2e-2 at most were measured.
  double sum_err = 0, max_err = 0, nll = 0, ref_nll = 0;
  int same_top = 0;
  for (size_t i = 1; i < ref.ids.size(); ++i) {
    const double err = std::fabs(got[i - 1].sampled.logprob - ref.logprobs[i]);
    sum_err += err;
    max_err = std::max(max_err, err);
    nll -= got[i - 1].sampled.logprob;
    ref_nll -= ref.logprobs[i];
    same_top += got[i - 1].top[0].token_id == ref.top1[i - 1];
  }
  const double n = double(ref.ids.size() - 1);
  std::printf("engine vs torch over %d tokens: mean |d logprob| %.2e, max %.2e; mean NLL %.5f vs %.5f; same top-1 %d\n",
              int(n), sum_err / n, max_err, nll / n, ref_nll / n, same_top);
  EXPECT_LT(sum_err / n, 8e-3);
  EXPECT_LT(max_err, 6e-2);
  EXPECT_NEAR(nll / n, ref_nll / n, 2e-3);
  EXPECT_GE(same_top, int(n) - 3);  // near-ties only
}

// The held-out ids as text: decoding then encoding gives the same 512 tokens back.
std::string reference_text_file(const Reference& ref) {
  const Tokenizer tok = Tokenizer::from_file(default_model() + "/tokenizer.json");
  const std::string text = tok.decode(ref.ids);
  EXPECT_EQ(tok.encode(text, false), ref.ids) << "the reference ids do not round-trip through text";
  const fs::path path = fs::temp_directory_path() / ("nanovllm-default-model-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << text;
  return path.string();
}

TEST(DefaultModel, PerplexityMatchesTorchAndFp8KvIsClose) {
  const Reference ref = load_reference();
  ASSERT_EQ(ref.ids.size(), 512u);
  const std::string text = reference_text_file(ref);
  // llama-perplexity's rule on one chunk of 512: tokens 257..511 scored.
  double ref_nll = 0;
  for (size_t i = 257; i < 512; ++i) ref_nll -= ref.logprobs[i];
  const double ref_ppl = std::exp(ref_nll / 255);
  const std::string flags = " --model " + default_model() + " --file " + text +
                            " --ctx 512 --max-model-len 1024 --kv-cache-memory 64M --threads 2 --json";
  const fs::path base = fs::temp_directory_path() / ("nanovllm-default-model-" + std::to_string(::getpid()) + ".kld");
  test::CliResult r = test::nanovllm("perplexity" + flags + " --save-logits " + base.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json bf16 = nlohmann::json::parse(r.out);
  EXPECT_EQ(bf16["tokens_scored"], 255);
  EXPECT_NEAR(bf16["ppl"].get<double>() / ref_ppl, 1.0, 2e-3) << r.out << " vs torch " << ref_ppl;
  r = test::nanovllm("perplexity" + flags + " --kv-cache-dtype fp8 --kl-divergence " + base.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json fp8 = nlohmann::json::parse(r.out);
  std::printf("torch PPL %.4f; engine bf16 KV %.4f, fp8 KV %.4f; fp8 vs bf16: mean KLD %.5f, same top %.1f%%\n", ref_ppl,
              bf16["ppl"].get<double>(), fp8["ppl"].get<double>(), fp8["kld"]["mean"].get<double>(),
              100 * fp8["kld"]["same_top"].get<double>());
  EXPECT_NEAR(fp8["kld"]["base_ppl"].get<double>(), bf16["ppl"].get<double>(), 1e-3);
  EXPECT_NEAR(fp8["ppl"].get<double>() / bf16["ppl"].get<double>(), 1.0, 0.02);
  EXPECT_LT(fp8["kld"]["mean"].get<double>(), 0.01);
  EXPECT_GT(fp8["kld"]["same_top"].get<double>(), 0.9);
  // The same run against itself: KLD 0.
  r = test::nanovllm("perplexity" + flags + " --kl-divergence " + base.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_LT(nlohmann::json::parse(r.out)["kld"]["max"].get<double>(), 1e-6);
  fs::remove(text);
  fs::remove(base);
}

TEST(DefaultModel, PerplexityRefusesBadInputClearly) {
  const fs::path dir = fs::temp_directory_path() / ("nanovllm-perplexity-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "empty.txt").close();
  std::ofstream(dir / "short.txt") << "Call me Ishmael.";
  std::string longer;
  for (int i = 0; i < 200; ++i) longer += "It is a truth universally acknowledged. ";
  std::ofstream(dir / "long.txt") << longer;
  const std::string m = " --model " + default_model() + " --max-model-len 256 --kv-cache-memory 16M --threads 2";
  struct Case {
    std::string args, error;
  };
  // A --save-logits file of another vocabulary: a tiny random model with Qwen3's tokenizer.
  const std::string other = (dir / "qwen3-vocab").string();
  test::CliResult made = test::nanovllm("make-model --preset tiny --vocab 151936 --tokenizer auto --seed 1 --out " + other);
  ASSERT_EQ(made.status, 0) << made.err;
  const std::string foreign = (dir / "foreign.kld").string();
  test::CliResult saved = test::nanovllm("perplexity --model " + other + " --file " + (dir / "long.txt").string() +
                                         " --ctx 64 --chunks 1 --threads 2 --save-logits " + foreign);
  ASSERT_EQ(saved.status, 0) << saved.err;
  const std::vector<Case> cases = {
      {"--file " + (dir / "missing.txt").string(), "cannot read it"},
      {"--file " + (dir / "empty.txt").string(), "the file is empty"},
      {"--file " + (dir / "short.txt").string() + " --ctx 64", "less than one chunk of --ctx 64"},
      {"--file " + (dir / "long.txt").string() + " --ctx 512", "--ctx 512 needs max_model_len above it"},
      {"--file " + (dir / "long.txt").string() + " --ctx 64 --chunks 1 --kl-divergence " + foreign,
       "saved from a model with another vocabulary"},
      {"--file " + (dir / "long.txt").string() + " --ctx 64 --kl-divergence " + (dir / "short.txt").string(),
       "not a file of `nanovllm perplexity --save-logits`"},
      {"--file " + (dir / "long.txt").string() + " --ctx 2", "--ctx must be at least 4"},
  };
  for (const Case& c : cases) {
    test::CliResult r = test::nanovllm("perplexity" + m + " " + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.err.find(c.error), std::string::npos) << c.args << "\n" << r.err;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace nanovllm
