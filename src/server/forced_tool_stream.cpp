#include "server/forced_tool_stream.h"

namespace nanovllm::server {

using Json = nlohmann::ordered_json;

Json ForcedToolStream::add(const std::string& text) {
  if (!name_.empty()) {
    if (text.empty()) return Json::array();
    if (num_calls_ == 0) {
      num_calls_ = 1;
      return Json::array({{{"index", 0}, {"id", id_prefix_ + "0"}, {"type", "function"},
                           {"function", {{"name", name_}, {"arguments", text}}}}});
    }
    return Json::array({{{"index", 0}, {"function", {{"arguments", text}}}}});
  }
  return required_calls(text);
}

// The grammar holds the text to [ {...}, ... ]: an item is the text from a '{' at depth 1 to the
// '}' that brings the depth back to 1 (braces and brackets inside strings do not count).
Json ForcedToolStream::required_calls(const std::string& text) {
  Json out = Json::array();
  for (const char ch : text) {
    if (depth_ >= 2) item_ += ch;
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (ch == '\\') escaped_ = true;
      else if (ch == '"') in_string_ = false;
      continue;
    }
    if (ch == '"') {
      in_string_ = true;
    } else if (ch == '{' || ch == '[') {
      if (++depth_ == 2) item_ = ch;
    } else if (ch == '}' || ch == ']') {
      if (--depth_ != 1 || ch != '}') continue;
      const Json item = Json::parse(item_, nullptr, /*allow_exceptions=*/false);
      item_.clear();
      if (!item.is_object() || !item.contains("name") || !item["name"].is_string() ||
          !item.contains("parameters"))
        continue;
      const int index = num_calls_++;
      out.push_back({{"index", index}, {"id", id_prefix_ + std::to_string(index)},
                     {"type", "function"},
                     {"function", {{"name", item["name"]}, {"arguments", item["parameters"].dump()}}}});
    }
  }
  return out;
}

}  // namespace nanovllm::server
