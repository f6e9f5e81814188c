#pragma once
// Helpers shared by tests: where the source and build trees are (set by CTest).
#include <string>

namespace nanovllm::test {

std::string source_dir();  // NANOVLLM_SOURCE_DIR, else "."
std::string binary_dir();  // NANOVLLM_BINARY_DIR, else "."

}  // namespace nanovllm::test
