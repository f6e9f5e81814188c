#include "server/tool_parser.h"

#include <nlohmann/json.hpp>

#include "server/tag_scanner.h"

namespace nanovllm::server {

namespace {
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";
}  // namespace

bool parse_tool_call_body(const std::string& body, ToolCall& call) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  call.name = j["name"].get<std::string>();
  nlohmann::json args = j.contains("arguments") ? j["arguments"] : nlohmann::json::object();
  call.arguments = args.is_string() ? args.get<std::string>() : args.dump();
  return true;
}

ToolDelta ToolParser::add(const std::string& delta) {
  pending_ += delta;
  return drain(false);
}

ToolDelta ToolParser::finish() { return drain(true); }

ToolDelta ToolParser::parse(const std::string& text, const std::string& id_prefix) {
  ToolParser p(id_prefix);
  ToolDelta a = p.add(text), b = p.finish();
  a.content += b.content;
  for (auto& c : b.calls) a.calls.push_back(std::move(c));
  return a;
}

ToolDelta ToolParser::drain(bool final_chunk) {
  ToolDelta out;
  for (;;) {
    if (!in_call_) {
      size_t open = pending_.find(kToolOpen);
      if (open != std::string::npos) {
        if (num_calls_ == 0) out.content += pending_.substr(0, open);
        pending_.erase(0, open + kToolOpen.size());
        in_call_ = true;
        continue;
      }
      size_t keep = final_chunk ? 0 : partial_tag_suffix(pending_, kToolOpen);
      if (num_calls_ == 0) out.content += pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return out;
    }
    size_t close = pending_.find(kToolClose);
    if (close == std::string::npos) {
      if (final_chunk) {  // left open: give it back as text
        if (num_calls_ == 0) out.content += std::string(kToolOpen) + pending_;
        pending_.clear();
        in_call_ = false;
      }
      return out;
    }
    std::string body = pending_.substr(0, close);
    pending_.erase(0, close + kToolClose.size());
    in_call_ = false;
    ToolCall call;
    if (parse_tool_call_body(body, call)) {
      call.id = id_prefix_ + std::to_string(num_calls_++);
      out.calls.push_back(std::move(call));
    } else if (num_calls_ == 0) {
      out.content += std::string(kToolOpen) + body + std::string(kToolClose);
    }
  }
}

}  // namespace nanovllm::server
