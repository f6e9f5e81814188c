#pragma once
// Qwen3's (Hermes-style) tool calls in generated text:
//   content<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>...
// parsed into OpenAI tool_calls (vLLM's hermes tool parser).
//
// Rule: text before the first "<tool_call>" is content; each "<tool_call>...</tool_call>" whose
// body is a JSON object with a string "name" (and "arguments" any JSON value, default {}) becomes a
// tool call with arguments serialized as a JSON string. A block that does not parse, or one left
// open at the end, is given back as content verbatim. Text between or after calls is dropped when
// at least one call parsed (as vLLM does). Streaming holds back only a tail that could still be
// "<tool_call>", so concatenated content deltas and calls equal parse() of the whole text.
#include <string>
#include <utility>
#include <vector>

namespace nanovllm::server {

struct ToolCall {
  std::string id;         // id_prefix + the call's index in the output
  std::string name;
  std::string arguments;  // JSON text
};

struct ToolDelta {
  std::string content;
  std::vector<ToolCall> calls;  // complete calls found in this delta
};

class ToolParser {
 public:
  // id_prefix: makes call ids unique, e.g. "call_<request id>_".
  explicit ToolParser(std::string id_prefix = "call_") : id_prefix_(std::move(id_prefix)) {}
  ToolDelta add(const std::string& delta);
  ToolDelta finish();
  bool has_calls() const { return num_calls_ > 0; }

  static ToolDelta parse(const std::string& text, const std::string& id_prefix = "call_");

 private:
  ToolDelta drain(bool final_chunk);

  std::string id_prefix_;
  std::string pending_;
  bool in_call_ = false;
  int num_calls_ = 0;
};

// Parses one tool-call body (id left empty); false unless {"name": string, "arguments": ...}.
bool parse_tool_call_body(const std::string& body, ToolCall& call);

}  // namespace nanovllm::server
