#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace nanovllm {

// A JSON value for an error message: scalars as JSON (shortened), arrays by their first
// elements, objects by name; never recursive (headers may nest deeply).
std::string json_brief(const nlohmann::json& v);

}  // namespace nanovllm
