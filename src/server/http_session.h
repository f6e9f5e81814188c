#pragma once
// One HTTP/1.1 connection (Boost.Beast): reads requests (with header and body size limits and
// timeouts), hands each to the router, writes a whole response or a chunked stream (SSE), keeps
// the connection alive. Everything runs on the server's io thread; the router answers through the
// session's methods.
//
// Timeouts: a kept-alive connection may wait keep_alive_timeout_s for its next request's first
// byte (then it is closed); from that byte the header must arrive within header_timeout_s, then
// the body within body_timeout_s, else the connection is closed: a client that trickles bytes
// holds a connection for a bounded time. A request with `Expect: 100-continue` gets its interim
// 100 once its header is accepted.
//
// Disconnects: while a request is being handled, a pending wait-for-readable on the socket sees the
// peer close (readable with nothing to read, or an error); so does a failed write. Either calls
// the on_disconnect hook once, so that the router aborts the request's generation.
#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio.hpp>
#include <boost/beast.hpp>

namespace nanovllm::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

class HttpSession;
// Handles one request; answers by calling session->send(...) or start_stream(...) now or later.
using RequestHandler = std::function<void(const std::shared_ptr<HttpSession>&, HttpRequest&&)>;
// Answers what could not be read (status 400/413/431/503, message).
using ParseErrorHandler = std::function<HttpResponse(int status, const std::string& message)>;

struct SessionOptions {
  uint64_t max_body_bytes = 4 << 20;
  uint32_t max_header_bytes = 16 << 10;
  int keep_alive_timeout_s = 30;  // waiting for the first byte of a request
  int header_timeout_s = 10;      // from that byte to the end of the header
  int body_timeout_s = 60;        // from the end of the header to the end of the body
};

// What the connections share: counts behind the server's caps.
// Atomic: the last reference to a session may be dropped on a worker thread.
struct ConnectionLoad {
  std::atomic<int> connections{0};      // open sessions
  std::atomic<int> requests{0};         // requests read and not yet answered
  std::atomic<uint64_t> body_bytes{0};  // bodies being received: declared length (chunked: the limit)
  uint64_t max_body_bytes = 0;          // cap on body_bytes (0: none); beyond it a request gets 503
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, const SessionOptions& options, std::shared_ptr<ConnectionLoad> load,
              RequestHandler handler, ParseErrorHandler on_parse_error);
  ~HttpSession();
  void start();
  // Answers `response` at once without reading a request, then closes (the server is over its
  // connection cap).
  void reject(HttpResponse response);

  // A whole response to the current request; then the next request is read (keep-alive).
  void send(HttpResponse response);
  // A chunked response: the header now, then write_chunk() pieces, then end_stream().
  void start_stream(http::status status, const std::string& content_type);
  void write_chunk(std::string data);
  void end_stream();
  // Called once if the peer goes away while the current request is handled.
  void on_disconnect(std::function<void()> hook);
  bool disconnected() const { return disconnected_; }
  // Ends the connection after the current response (server shutdown); closes it now when idle.
  void close_when_idle();
  bool busy() const { return busy_; }
  unsigned version() const { return version_; }
  bool keep_alive() const { return keep_alive_; }

 private:
  struct Out {
    enum Kind { RESPONSE, HEADER, CHUNK, LAST_CHUNK } kind;
    std::shared_ptr<HttpResponse> response;
    std::shared_ptr<http::response<http::empty_body>> header;
    std::shared_ptr<http::response_serializer<http::empty_body>> serializer;
    std::string data;
  };

  void read_request();
  void read_header();
  void on_header(beast::error_code ec);
  void read_body();
  void on_read(beast::error_code ec);
  void answer_read_error(beast::error_code ec);
  void answer_error(int status, const std::string& message);
  void release_body_bytes();
  void watch_peer();
  void write_next();
  void on_written(beast::error_code ec, bool last);
  void fail_connection();
  void finish_request();
  void drain();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  SessionOptions options_;
  std::shared_ptr<ConnectionLoad> load_;
  uint64_t body_bytes_ = 0;    // this request's share of load_->body_bytes
  bool counted_ = false;       // this request is counted in load_->requests
  RequestHandler handler_;
  ParseErrorHandler on_parse_error_;
  std::deque<Out> out_;
  bool writing_ = false;
  bool busy_ = false;          // a request is being handled (until its response is written)
  bool watching_ = false;      // a wait-for-readable is pending
  bool disconnected_ = false;
  bool closing_ = false;       // close after the current response
  bool keep_alive_ = true;
  unsigned version_ = 11;
  std::function<void()> on_disconnect_;
};

}  // namespace nanovllm::server
