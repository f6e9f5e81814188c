// libFuzzer target for chat templates (the Jinja lexer, parser and interpreter): any template
// source must either parse or throw nanovllm::Error, and a parsed template must render a small
// conversation or throw Error; never crash, overflow the stack, hang or leak. The render runs
// under tighter limits than the default (RenderLimits) so that every input is fast.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json kMessages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi <b>there</b> \u00e9"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "{\"ok\": 1}"},
    {"role": "user", "content": [{"type": "text", "text": "more"}]}])");
  static const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  nanovllm::RenderLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  try {
    nanovllm::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size), "<s>", "</s>");
    t.set_limits(limits);
    (void)t.render(kMessages, kTools, true, {{"enable_thinking", false}});
  } catch (const nanovllm::Error&) {
  }
  return 0;
}
