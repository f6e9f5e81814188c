#include "util/json_brief.h"

namespace nanovllm {

std::string json_brief(const nlohmann::json& v) {
  using json = nlohmann::json;
  if (v.is_object()) return "an object";
  if (v.is_array()) {
    std::string s = "[";
    size_t i = 0;
    for (const json& x : v) {
      if (i) s += ", ";
      if (i++ == 4) return s + "...]";
      s += x.is_structured() ? (x.is_array() ? "[...]" : "{...}")
                             : x.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    return s + "]";
  }
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace nanovllm
