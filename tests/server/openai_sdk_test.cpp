// The npm `openai` package (v6), unmodified, against `nanovllm serve` (tests/server/openai_sdk.mjs):
// completions and chat, streaming and not, tools, n > 1, logprobs, stop strings, errors, and
// outputs equal to `nanovllm generate` for the same seed.
#include "server/server_fixture.h"

namespace nanovllm {
namespace {

TEST(ServerOpenAISdk, AllChecksPass) {
  const std::string model = test::tiny_text_model();
  const std::string sdk = test::source_dir() + "/node_modules/openai/package.json";
  ASSERT_TRUE(std::filesystem::exists(sdk)) << sdk << " missing: run `npm install` (scripts/install_deps.sh)";
  test::ServerProcess server(model, {"--api-key", "test-key", "--served-model-name", "tiny-qwen3",
                                     "--kv-cache-memory", "16777216"});
  ASSERT_TRUE(server.ready()) << server.log();
  auto [status, out] = test::run_command("timeout 240 node " + test::source_dir() + "/tests/server/openai_sdk.mjs " +
                                         std::to_string(server.port()) + " tiny-qwen3 " + test::binary_dir() +
                                         "/nanovllm " + model);
  EXPECT_EQ(status, 0) << out << "\nserver log:\n" << server.log();
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
  EXPECT_NE(out.find("13 passed"), std::string::npos) << out;
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace nanovllm
