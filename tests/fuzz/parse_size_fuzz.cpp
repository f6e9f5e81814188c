// libFuzzer target for the CLI's number parsers (src/util/parse_size.h): any text must either
// parse or throw nanovllm::Error; a parsed size is >= 0 and format_size reads back the same
// number; a parsed integer is within its bounds and prints back as the same digits.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "util/check.h"
#include "util/parse_size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const int64_t n = nanovllm::parse_size(text, "--fuzz");
    if (n < 0) __builtin_trap();
    if (nanovllm::parse_size(nanovllm::format_size(n)) != n) __builtin_trap();
  } catch (const nanovllm::Error&) {
  }
  try {
    const int64_t v = nanovllm::parse_int(text, -1000, std::numeric_limits<int64_t>::max(), "--fuzz");
    if (v < -1000) __builtin_trap();
    if (nanovllm::parse_int(std::to_string(v), -1000, std::numeric_limits<int64_t>::max()) != v) __builtin_trap();
  } catch (const nanovllm::Error&) {
  }
  return 0;
}
