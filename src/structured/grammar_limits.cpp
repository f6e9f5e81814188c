#include "structured/grammar_limits.h"

#include "util/check.h"

namespace nanovllm::structured {

void CompileDeadline::check() const {
  if (std::chrono::steady_clock::now() > end_) {
    fail("grammar limit max_compile_seconds ({}) exceeded while compiling", seconds_);
  }
}

}  // namespace nanovllm::structured
