#include "reference/test_util.h"

#include <cstdlib>

#ifndef NANOVLLM_DEFAULT_SOURCE_DIR
#define NANOVLLM_DEFAULT_SOURCE_DIR "."
#endif
#ifndef NANOVLLM_DEFAULT_BINARY_DIR
#define NANOVLLM_DEFAULT_BINARY_DIR "."
#endif

namespace nanovllm::test {

// The environment's value (scripts that run a test binary by hand), else the folders CMake
// configured (compile definitions on this file): ctest needs no ENVIRONMENT property, whose
// list escaping gtest_discover_tests reads differently across CMake versions.
std::string source_dir() {
  const char* s = std::getenv("NANOVLLM_SOURCE_DIR");
  return s ? s : NANOVLLM_DEFAULT_SOURCE_DIR;
}

std::string binary_dir() {
  const char* s = std::getenv("NANOVLLM_BINARY_DIR");
  return s ? s : NANOVLLM_DEFAULT_BINARY_DIR;
}

}  // namespace nanovllm::test
