#include "server/http_session.h"

#include <charconv>
#include <utility>

namespace nanovllm::server {

HttpSession::HttpSession(tcp::socket socket, const SessionOptions& options, std::shared_ptr<ConnectionLoad> load,
                         RequestHandler handler, ParseErrorHandler on_parse_error)
    : stream_(std::move(socket)),
      options_(options),
      load_(std::move(load)),
      handler_(std::move(handler)),
      on_parse_error_(std::move(on_parse_error)) {
  ++load_->connections;
}

HttpSession::~HttpSession() {
  release_body_bytes();
  if (counted_) --load_->requests;
  --load_->connections;
}

void HttpSession::start() { read_request(); }

void HttpSession::reject(HttpResponse response) {
  busy_ = true;
  keep_alive_ = false;
  closing_ = true;
  stream_.expires_after(std::chrono::seconds(options_.header_timeout_s));
  send(std::move(response));
}

void HttpSession::read_request() {
  parser_.emplace();
  parser_->body_limit(options_.max_body_bytes);
  parser_->header_limit(options_.max_header_bytes);
  if (buffer_.size() > 0) return read_header();  // a pipelined request has begun
  // Idle until the first byte: the keep-alive timeout.
  stream_.expires_after(std::chrono::seconds(options_.keep_alive_timeout_s));
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      self->stream_.socket().close(ignored);
      return;
    }
    self->buffer_.commit(n);
    self->read_header();
  });
}

void HttpSession::read_header() {
  stream_.expires_after(std::chrono::seconds(options_.header_timeout_s));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (ec) {
    answer_read_error(ec);
    return;
  }
  // Reserve the body's bytes against the server's budget for bodies in flight.
  // The declared length, or the limit for a chunked body. (Not content_length().value_or(...):
  // g++ 12 under the sanitizers warns, falsely, that boost::optional's storage may be unset.)
  uint64_t want = parser_->chunked() ? options_.max_body_bytes : 0;
  if (auto cl = parser_->get().find(http::field::content_length); cl != parser_->get().end()) {
    const std::string_view v = cl->value();  // Beast has checked its syntax (and the body limit)
    std::from_chars(v.data(), v.data() + v.size(), want);
  }
  if (want > 0 && load_->max_body_bytes > 0 && load_->body_bytes + want > load_->max_body_bytes) {
    answer_error(503, "the server is receiving too many request bodies at once; retry later");
    return;
  }
  body_bytes_ = want;
  load_->body_bytes += want;
  if (parser_->is_done()) return on_read({});
  auto expect = parser_->get().find(http::field::expect);
  if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](beast::error_code wec, size_t) {
                       if (wec) return self->answer_read_error(wec);
                       self->read_body();
                     });
    return;
  }
  read_body();
}

void HttpSession::read_body() {
  stream_.expires_after(std::chrono::seconds(options_.body_timeout_s));
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_read(ec);
  });
}

void HttpSession::release_body_bytes() {
  load_->body_bytes -= std::exchange(body_bytes_, 0);
}

void HttpSession::answer_read_error(beast::error_code ec) {
  int status = 0;
  std::string message;
  if (ec == http::error::body_limit) {
    status = 413;
    message = "the request body is larger than the limit of " + std::to_string(options_.max_body_bytes) + " bytes";
  } else if (ec == http::error::header_limit) {
    status = 431;
    message = "the request header is larger than the limit of " + std::to_string(options_.max_header_bytes) + " bytes";
  } else if (ec.category() == beast::error_code(http::error::end_of_stream).category() && ec != http::error::end_of_stream) {
    status = 400;
    message = "malformed HTTP request: " + ec.message();
  }
  // The peer closed, reset, or timed out (beast's stream has closed the socket): nothing to answer.
  if (status == 0 || closing_) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    return;
  }
  answer_error(status, message);
}

void HttpSession::answer_error(int status, const std::string& message) {
  release_body_bytes();
  busy_ = true;
  keep_alive_ = false;
  closing_ = true;
  stream_.expires_after(std::chrono::seconds(options_.header_timeout_s));
  send(on_parse_error_(status, message));
}

void HttpSession::on_read(beast::error_code ec) {
  release_body_bytes();
  if (ec) {
    answer_read_error(ec);
    return;
  }
  busy_ = true;
  counted_ = true;
  ++load_->requests;
  stream_.expires_never();
  HttpRequest req = parser_->release();
  version_ = req.version();
  keep_alive_ = req.keep_alive();
  watch_peer();
  handler_(shared_from_this(), std::move(req));
}

void HttpSession::watch_peer() {
  if (watching_ || disconnected_) return;
  watching_ = true;
  stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    self->watching_ = false;
    if (ec == net::error::operation_aborted || !self->busy_ || self->disconnected_) return;
    beast::error_code aec;
    size_t available = self->stream_.socket().available(aec);
    if (ec || aec || available == 0) {  // readable with nothing to read: the peer closed
      self->fail_connection();
    }
    // Bytes arrived while busy (a pipelined request): stop watching; a failed write still tells.
  });
}

void HttpSession::on_disconnect(std::function<void()> hook) {
  if (disconnected_) {
    if (hook) hook();
    return;
  }
  on_disconnect_ = std::move(hook);
}

void HttpSession::send(HttpResponse response) {
  if (disconnected_) return;
  response.version(version_);
  response.keep_alive(keep_alive_ && !closing_);
  response.prepare_payload();
  Out o{Out::RESPONSE, std::make_shared<HttpResponse>(std::move(response)), nullptr, nullptr, {}};
  out_.push_back(std::move(o));
  write_next();
}

void HttpSession::start_stream(http::status status, const std::string& content_type) {
  if (disconnected_) return;
  auto header = std::make_shared<http::response<http::empty_body>>(status, version_);
  header->set(http::field::content_type, content_type);
  header->set(http::field::cache_control, "no-cache");
  header->keep_alive(keep_alive_ && !closing_);
  header->chunked(true);
  auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*header);
  out_.push_back(Out{Out::HEADER, nullptr, header, serializer, {}});
  write_next();
}

void HttpSession::write_chunk(std::string data) {
  if (disconnected_ || data.empty()) return;
  const bool back_in_flight = writing_ && out_.size() == 1;
  if (!out_.empty() && !back_in_flight && out_.back().kind == Out::CHUNK) {
    out_.back().data += data;  // coalesce what a slow socket has not taken yet
  } else {
    out_.push_back(Out{Out::CHUNK, nullptr, nullptr, nullptr, std::move(data)});
  }
  write_next();
}

void HttpSession::end_stream() {
  if (disconnected_) return;
  out_.push_back(Out{Out::LAST_CHUNK, nullptr, nullptr, nullptr, {}});
  write_next();
}

void HttpSession::write_next() {
  if (writing_ || out_.empty() || disconnected_) return;
  writing_ = true;
  Out& o = out_.front();
  auto self = shared_from_this();
  switch (o.kind) {
    case Out::RESPONSE:
      http::async_write(stream_, *o.response,
                        [self](beast::error_code ec, size_t) { self->on_written(ec, true); });
      break;
    case Out::HEADER:
      http::async_write_header(stream_, *o.serializer,
                               [self](beast::error_code ec, size_t) { self->on_written(ec, false); });
      break;
    case Out::CHUNK:
      net::async_write(stream_, http::make_chunk(net::buffer(o.data)),
                       [self](beast::error_code ec, size_t) { self->on_written(ec, false); });
      break;
    case Out::LAST_CHUNK:
      net::async_write(stream_, http::make_chunk_last(),
                       [self](beast::error_code ec, size_t) { self->on_written(ec, true); });
      break;
  }
}

void HttpSession::on_written(beast::error_code ec, bool last) {
  writing_ = false;
  if (!out_.empty()) out_.pop_front();
  if (ec) {
    fail_connection();
    return;
  }
  if (last) {
    finish_request();
    return;
  }
  write_next();
}

void HttpSession::fail_connection() {
  if (disconnected_) return;
  disconnected_ = true;
  if (std::exchange(counted_, false)) --load_->requests;
  out_.clear();
  beast::error_code ignored;
  stream_.socket().close(ignored);
  busy_ = false;
  if (auto hook = std::exchange(on_disconnect_, nullptr)) hook();
}

void HttpSession::finish_request() {
  busy_ = false;
  if (std::exchange(counted_, false)) --load_->requests;
  on_disconnect_ = nullptr;
  beast::error_code ignored;
  if (watching_) stream_.socket().cancel(ignored);  // nothing else is pending now
  if (closing_ || !keep_alive_) {
    // Lingering close: stop sending, then discard what the peer still sends (for 2 s at most), so
    // that closing with unread bytes does not reset the connection before the peer reads our reply.
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    drain();
    return;
  }
  read_request();
}

void HttpSession::drain() {
  auto buf = std::make_shared<std::array<char, 4096>>();
  stream_.async_read_some(net::buffer(*buf), [self = shared_from_this(), buf](beast::error_code ec, size_t) {
    if (!ec) return self->drain();
    beast::error_code ignored;
    self->stream_.socket().close(ignored);
  });
}

void HttpSession::close_when_idle() {
  closing_ = true;
  if (!busy_) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }
}

}  // namespace nanovllm::server
