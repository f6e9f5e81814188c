// The server tests' HTTP client (server_fixture.h), on Boost.Beast: compiled once for all of
// them instead of in each test file.
#include "server/server_fixture.h"

#include <boost/asio.hpp>
#include <boost/beast.hpp>

namespace nanovllm::test {

HttpResult http_call(int port, const std::string& method, const std::string& target,
                     const std::string& body,
                     const std::vector<std::pair<std::string, std::string>>& headers,
                     int timeout_s) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  namespace net = boost::asio;
  HttpResult r;
  try {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(timeout_s));
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port)));
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(stream, buf, parser);
    auto res = parser.release();
    r.status = res.result_int();
    r.body = res.body();
    for (const auto& f : res) r.headers[std::string(f.name_string())] = std::string(f.value());
  } catch (const std::exception& e) {
    r.status = 0;
    r.body = e.what();
  }
  return r;
}

std::string raw_call(int port, const std::string& bytes, bool half_close, int timeout_s) {
  namespace net = boost::asio;
  std::string out;
  try {
    net::io_context ioc;
    boost::beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(timeout_s));
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), uint16_t(port)));
    boost::system::error_code ec;
    // The server may answer before reading all of it.
    net::write(stream.socket(), net::buffer(bytes), ec);
    if (half_close) stream.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
    char buf[4096];
    for (int i = 0; i < 100000; ++i) {
      size_t n = stream.read_some(net::buffer(buf), ec);
      out.append(buf, n);
      if (ec) break;
    }
  } catch (const std::exception& e) {
    out += std::string("<error: ") + e.what() + ">";
  }
  return out;
}

}  // namespace nanovllm::test
