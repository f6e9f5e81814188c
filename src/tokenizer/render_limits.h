#pragma once
// Bounds on one chat-template render, so that no template (they come with downloaded models)
// can hang the engine, exhaust its memory or overflow its stack. Past a bound the render throws
// nanovllm::Error saying which bound and its value. The defaults are far above what real chat
// templates need (Qwen3's template on a 100-message conversation: ~60k steps, depth < 40).
#include <cstdint>

namespace nanovllm {

struct RenderLimits {
  int64_t max_steps = 5'000'000;           // statements run, expressions evaluated, loop iterations
  int64_t max_output_bytes = int64_t{64} << 20;  // the output, and any string the render builds
  int max_depth = 512;                     // statements, expressions and macro calls nested at once
};

}  // namespace nanovllm
