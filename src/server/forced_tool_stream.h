#pragma once
// The tool calls of a forced tool_choice (openai_request.cpp constrain_tool_choice), found while
// the constrained JSON streams in (vLLM streams these as tool_calls deltas, never as content):
//   - a named function: the whole output is its arguments. The first delta opens call 0 (id,
//     name, the text so far as arguments); every later one appends its text to the arguments.
//   - "required": the output is an array of {"name", "parameters"} objects. A call is sent whole
//     (name and its parameters' JSON text) as soon as its object closes.
// Concatenating the deltas' arguments gives the named call's raw text, or, for "required", the
// calls forced_tool_calls (serving_output.cpp) parses from the whole output.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm::server {

class ForcedToolStream {
 public:
  // name: the named function, or empty for "required". id_prefix + the call's index is its id.
  ForcedToolStream(std::string name, std::string id_prefix)
      : name_(std::move(name)), id_prefix_(std::move(id_prefix)) {}

  // The OpenAI tool_calls delta entries ({"index", ...}) that `text` completes; empty if none.
  nlohmann::ordered_json add(const std::string& text);
  int num_calls() const { return num_calls_; }

 private:
  nlohmann::ordered_json required_calls(const std::string& text);

  std::string name_, id_prefix_;
  int num_calls_ = 0;
  // "required": the scanner over the array (depth outside strings; the open item's text).
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
  std::string item_;
};

}  // namespace nanovllm::server
