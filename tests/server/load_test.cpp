// 1,000 concurrent streaming requests (tests/server/load.mjs): the 900 kept complete with exactly
// max_tokens tokens; the 100 disconnected mid-stream are aborted, and within 1 s of the last
// disconnect no request runs and every KV block is free; /health answers throughout. Prints the
// server's peak memory (VmHWM) and threads.
#include <nlohmann/json.hpp>

#include "server/server_fixture.h"

namespace nanovllm {
namespace {

TEST(ServerLoad, ThousandStreamsWithDisconnects) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--kv-cache-memory", "268435456", "--max-model-len", "32768"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int n = 1000, max_tokens = 8;
  auto [status, out] = test::run_command("timeout 400 node " + test::source_dir() + "/tests/server/load.mjs " +
                                         std::to_string(server.port()) + " " + std::to_string(server.pid()) + " " +
                                         std::to_string(n) + " " + std::to_string(max_tokens));
  ASSERT_EQ(status, 0) << out << "\nserver log:\n" << server.log();
  nlohmann::json r = nlohmann::json::parse(out.substr(out.rfind("{\"requests\"")), nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  std::printf("load: %s\n", r.dump().c_str());
  EXPECT_EQ(r["normal"], 900);
  EXPECT_EQ(r["exact_max_tokens"], 900) << r["bad"].dump();
  EXPECT_EQ(r["disconnected"], 100);
  EXPECT_EQ(r["finished_before_cut"], 0);  // each asks for 30,000 tokens: none can end before its cut
  EXPECT_GE(r["aborts_counted"].get<double>(), 100.0);
  ASSERT_FALSE(r["freed_after_last_disconnect_s"].is_null()) << r["last_metrics"].dump();
  EXPECT_LE(r["freed_after_last_disconnect_s"].get<double>(), 1.0);
  EXPECT_EQ(r["health_bad"], 0);
  EXPECT_GT(r["health_ok"].get<int>(), 0);
  RecordProperty("vmhwm_mib", std::to_string(r["vmhwm_mib"].get<double>()));
  RecordProperty("peak_threads", std::to_string(r["peak_threads"].get<int>()));
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace nanovllm
