#pragma once
// Helpers shared by the safetensors reader/writer (safetensors.cpp) and Checkpoint
// (checkpoint.cpp). Not part of the model interface.
#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/json_brief.h"

namespace nanovllm::safetensors_detail {

using json = nlohmann::json;

inline std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

inline std::string brief(const json& v) { return json_brief(v); }

}  // namespace nanovllm::safetensors_detail
