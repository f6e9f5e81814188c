#include "util/check.h"

namespace nanovllm {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw std::logic_error(fmt::format("internal error: {} failed at {}:{}{}{}", expr, file, line,
                                     msg.empty() ? "" : ": ", msg));
}

}  // namespace nanovllm
