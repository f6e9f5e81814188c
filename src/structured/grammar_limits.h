#pragma once
// Limits that keep a hostile grammar, regex or schema from exhausting time, memory or the C++
// stack. Compile-time limits are reported as a nanovllm::Error naming the limit (e.g.
// "grammar limit max_rules (100000) exceeded"). At run time, a stack deeper than
// max_stack_depth is a dead path (the token that needs it is not allowed, masks agree: JSON
// nested deeper is refused, never an error), and more than max_parse_stacks stacks at once (a
// grammar too ambiguous) is an Error naming the limit, thrown by the matcher.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace nanovllm::structured {

struct GrammarLimits {
  // ---- compile time
  size_t max_text_bytes = 1 << 20;  // GBNF / regex / schema / choices text, in bytes
  uint32_t max_rules = 100000;      // rules of the lowered grammar, helper rules included
  uint32_t max_elements = 2000000;  // elements (terminals, references, ends) of the lowered grammar
  uint32_t max_nesting_depth = 200;   // parentheses, repetition operators, schema nesting
  uint32_t max_repetition = 10000;    // the largest m or n of {m,n}, minLength, maxItems, ...
  double max_compile_seconds = 10.0;  // wall time of one compile_grammar
  // ---- run time (see above)
  uint32_t max_stack_depth = 1000;   // frames of one parse stack (nesting of the sentence)
  uint32_t max_parse_stacks = 1000;  // simultaneous parse stacks (ambiguity)
  // ---- per (grammar, vocabulary): cached token masks, in bytes (least recently used evicted;
  // a mask is at most ceil(V / 8) bytes, 19 KB for Qwen3, sparse ones less)
  size_t mask_cache_bytes = size_t(16) << 20;
};

// The time budget of one compile: check() throws Error naming max_compile_seconds once spent.
class CompileDeadline {
 public:
  explicit CompileDeadline(double seconds)
      : end_(std::chrono::steady_clock::now() +
             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                 std::chrono::duration<double>(seconds))),
        seconds_(seconds) {}
  void check() const;

 private:
  std::chrono::steady_clock::time_point end_;
  double seconds_;
};

}  // namespace nanovllm::structured
