// libFuzzer target for the safetensors reader: any byte string must either parse or throw
// nanovllm::Error; never crash, leak, read out of bounds, or allocate what the header claims.
// Built and run by scripts/fuzz.sh (tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = nanovllm::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    // Touch every tensor's bytes so that ASan checks the ranges the parser accepted.
    volatile uint8_t sink = 0;
    for (const auto& t : file->tensors()) {
      if (t.nbytes) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
      if (file->find(t.name) != &t) __builtin_trap();
    }
  } catch (const nanovllm::Error&) {
  }
  return 0;
}
