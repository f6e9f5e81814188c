#pragma once
// Qwen3's thinking output: "<think>reasoning</think>content". Splits streamed text into
// reasoning_content and content (vLLM's reasoning parser for Qwen3).
//
// Rule: when the output (leading whitespace aside) starts with "<think>" (or the prompt ended
// inside an open <think> block: starts_in_reasoning), everything up to "</think>" is reasoning and
// the rest is content; without "</think>" it is all reasoning. An output that does not start with
// "<think>" is all content. The tags themselves are dropped. Streaming holds back only a tail that could still
// be a tag, so concatenated deltas equal parse() of the whole text.
#include <string>

namespace nanovllm::server {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // starts_in_reasoning: the prompt ends inside an open <think> block (the template opened it).
  explicit ReasoningParser(bool starts_in_reasoning = false)
      : state_(starts_in_reasoning ? State::REASONING : State::START) {}

  ReasoningDelta add(const std::string& delta);
  ReasoningDelta finish();  // flushes what was held back

  // The whole output at once.
  static ReasoningDelta parse(const std::string& text, bool starts_in_reasoning = false);

 private:
  enum class State { START, REASONING, CONTENT };
  ReasoningDelta drain(bool final_chunk);

  State state_;
  std::string pending_;
};

}  // namespace nanovllm::server
