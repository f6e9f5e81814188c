// The server's caps and timeouts: past --max-connections a connection is answered 503 with
// Retry-After, past --max-requests a request 429 with Retry-After, a body past the budget of
// bodies in flight 503; a client that trickles its header or body, or idles, is disconnected
// after --header-timeout / --body-timeout / --keep-alive-timeout; `Expect: 100-continue` gets
// its interim response.
#include <boost/asio.hpp>
#include <chrono>
#include <thread>

#include "server/server_fixture.h"

namespace nanovllm {
namespace {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;

// A connection that stays open until destroyed.
struct OpenConnection {
  net::io_context ioc;
  net::ip::tcp::socket socket{ioc};
  explicit OpenConnection(int port) {
    socket.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port)));
  }
  void send(const std::string& bytes) { net::write(socket, net::buffer(bytes)); }
  // Reads until `until` appears, the peer closes, or timeout_s passes.
  std::string read(const std::string& until, int timeout_s = 10) {
    std::string out;
    const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
    socket.non_blocking(true);
    char buf[4096];
    while (Clock::now() < deadline && out.find(until) == std::string::npos) {
      boost::system::error_code ec;
      size_t n = socket.read_some(net::buffer(buf), ec);
      out.append(buf, n);
      if (ec == net::error::would_block) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      } else if (ec) {
        out += "<closed>";
        break;
      }
    }
    return out;
  }
};

const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

// Polls until a /health call on a new connection gets `status` (the server frees a connection
// once it sees the peer's close), at most 10 s.
bool health_becomes(int port, int status) {
  for (int i = 0; i < 500; ++i) {
    if (test::http_call(port, "GET", "/health", "", {}, 5).status == status) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(ServerConnectionLimits, PastMaxConnectionsA503WithRetryAfter) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--max-connections", "3"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  ASSERT_TRUE(health_becomes(port, 200));
  {
    OpenConnection a(port), b(port), c(port);
    a.send(kHealth);  // the three are served (kept alive)
    EXPECT_NE(a.read("{}").find("HTTP/1.1 200"), std::string::npos);
    OpenConnection d(port);
    d.send(kHealth);
    std::string reply = d.read("<closed>");
    EXPECT_NE(reply.find("HTTP/1.1 503"), std::string::npos) << reply;
    EXPECT_NE(reply.find("Retry-After: 1"), std::string::npos) << reply;
    EXPECT_NE(reply.find("\"error\""), std::string::npos) << reply;
    b.send(kHealth);  // the open ones still work
    EXPECT_NE(b.read("{}").find("HTTP/1.1 200"), std::string::npos);
  }
  EXPECT_TRUE(health_becomes(port, 200)) << "closed connections must free their places";
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

TEST(ServerConnectionLimits, PastMaxRequestsA429WithRetryAfter) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--max-requests", "1", "--max-model-len", "8192",
                                     "--kv-cache-memory", "67108864"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  {
    OpenConnection stream(port);
    const std::string body = R"({"prompt": "hi", "max_tokens": 8000, "ignore_eos": true, "stream": true})";
    stream.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
    ASSERT_NE(stream.read("data: ").find("HTTP/1.1 200"), std::string::npos);
    test::HttpResult r = test::http_call(port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
    EXPECT_EQ(r.status, 429) << r.body;
    EXPECT_EQ(r.headers["Retry-After"], "1");
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
    EXPECT_EQ(test::http_call(port, "GET", "/health", "", {}).status, 200);  // not counted against the cap
  }
  // The stream's client went away: its request is aborted and the next one is served.
  bool served = false;
  for (int i = 0; i < 250 && !served; ++i) {
    served = test::http_call(port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})").status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

TEST(ServerConnectionLimits, BodiesPastTheirBudgetGet503) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--max-body-bytes", "1000", "--max-body-bytes-in-flight", "1500"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  const std::string header = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             "Content-Length: 1000\r\n\r\n";
  OpenConnection a(port);
  a.send(header);  // 1000 bytes reserved while its body is awaited
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  OpenConnection b(port);
  b.send(header);
  std::string reply = b.read("<closed>");
  EXPECT_NE(reply.find("HTTP/1.1 503"), std::string::npos) << reply;
  EXPECT_NE(reply.find("Retry-After: 1"), std::string::npos) << reply;
  EXPECT_NE(reply.find("too many request bodies"), std::string::npos) << reply;
  a.send(std::string(1000, ' '));  // a's body (not JSON): answered, and its bytes released
  EXPECT_NE(a.read("\"error\"").find("HTTP/1.1 400"), std::string::npos);
  test::HttpResult ok = test::http_call(port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

TEST(ServerConnectionLimits, TricklingAndIdleClientsAreDisconnected) {
  const std::string model = test::tiny_text_model();
  test::ServerProcess server(model, {"--header-timeout", "1", "--body-timeout", "1", "--keep-alive-timeout", "2"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  auto closed_after_s = [&](const std::string& partial) {
    OpenConnection c(port);
    auto t0 = Clock::now();
    if (!partial.empty()) c.send(partial);
    std::string reply = c.read("<closed>", 15);
    EXPECT_NE(reply.find("<closed>"), std::string::npos) << reply;
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // A header that never ends (1 s), a body that never ends (1 s), a connection that never speaks (2 s).
  double header_s = closed_after_s("GET /health HTTP/1.1\r\nHost: x\r\n");
  double body_s = closed_after_s("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro");
  double idle_s = closed_after_s("");
  std::printf("closed after: header %.2f s, body %.2f s, idle %.2f s\n", header_s, body_s, idle_s);
  EXPECT_GE(header_s, 0.9);
  EXPECT_LT(header_s, 8.0);
  EXPECT_GE(body_s, 0.9);
  EXPECT_LT(body_s, 8.0);
  EXPECT_GE(idle_s, 1.9);
  EXPECT_LT(idle_s, 9.0);
  // A slow but steady client within the limits is served; Expect: 100-continue gets its 100.
  OpenConnection c(port);
  const std::string body = R"({"prompt": "hi", "max_tokens": 2})";
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n");
  EXPECT_NE(c.read("\r\n\r\n").find("HTTP/1.1 100 Continue"), std::string::npos);
  c.send(body);
  std::string reply = c.read("\"usage\"");
  EXPECT_NE(reply.find("HTTP/1.1 200"), std::string::npos) << reply;
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace nanovllm
