// The chat page at GET / driven in headless Chromium (tests/server/chat_page_test.mjs, npm
// playwright-core + Debian's chromium) against `nanovllm serve` on the tiny model: tokens stream
// in, Stop aborts the request on the server, thinking is folded, errors are shown. Screenshots
// are kept in <build>/test-artifacts/. A missing chromium or playwright-core fails the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "server/chat_page.h"
#include "server/server_fixture.h"

namespace nanovllm::test {
namespace {

TEST(ChatPage, IsOneSelfContainedDocument) {
  const std::string_view page = server::chat_page_html();
  EXPECT_TRUE(page.starts_with("<!doctype html>"));
  EXPECT_TRUE(page.ends_with("</html>\n"));
  EXPECT_NE(page.find("/v1/chat/completions"), std::string_view::npos);
  // No build step, no CDN, no external fonts: nothing is loaded from elsewhere.
  for (std::string_view external : {"http://", "https://", "<link", "src=\"", "@import", "url("})
    EXPECT_EQ(page.find(external), std::string_view::npos) << external;
}

TEST(ChatPage, HeadlessChromium) {
  const std::string model = tiny_text_model();
  ASSERT_FALSE(model.empty());
  ServerProcess server(model, {});
  ASSERT_TRUE(server.ready()) << server.log();

  HttpResult root = http_call(server.port(), "GET", "/", "", {});
  EXPECT_EQ(root.status, 200);
  EXPECT_EQ(root.body, server::chat_page_html());
  EXPECT_EQ(root.headers["Content-Type"].rfind("text/html", 0), 0u) << root.headers["Content-Type"];

  const fs::path artifacts = fs::absolute(binary_dir()) / "test-artifacts";
  fs::remove(artifacts / "chat_page.png");
  const std::string script = (fs::absolute(source_dir()) / "tests/server/chat_page_test.mjs").string();
  auto [code, out] = run_command("node '" + script + "' --url http://127.0.0.1:" +
                                 std::to_string(server.port()) + " --artifacts '" + artifacts.string() + "'");
  ASSERT_NE(code, 2) << "the chat page test needs Debian's chromium and npm playwright-core: "
                        "run scripts/install_deps.sh\n"
                     << out;
  ASSERT_EQ(code, 0) << out << "\n--- server ---\n" << server.log();
  EXPECT_TRUE(fs::exists(artifacts / "chat_page.png"));
  EXPECT_TRUE(fs::exists(artifacts / "chat_page_streaming.png"));
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace nanovllm::test
