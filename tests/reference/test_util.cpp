#include "reference/test_util.h"

#include <cstdlib>

namespace nanovllm::test {

std::string source_dir() {
  const char* s = std::getenv("NANOVLLM_SOURCE_DIR");
  return s ? s : ".";
}

std::string binary_dir() {
  const char* s = std::getenv("NANOVLLM_BINARY_DIR");
  return s ? s : ".";
}

}  // namespace nanovllm::test
