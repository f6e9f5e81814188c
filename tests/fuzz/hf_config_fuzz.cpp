// libFuzzer target for config.json and generation_config.json: any byte string must either
// parse into a config the engine can run (positive sizes, heads dividing evenly, ...) or throw
// nanovllm::Error; never crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/hf_config.h"
#include "util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const nanovllm::ModelConfig c = nanovllm::parse_model_config(text, "fuzz/config.json");
    // What the engine relies on once a config parsed.
    if (c.num_hidden_layers <= 0 || c.hidden_size <= 0 || c.num_attention_heads <= 0 ||
        c.num_key_value_heads <= 0 || c.head_dim <= 0 || c.vocab_size <= 0 ||
        c.num_attention_heads % c.num_key_value_heads != 0)
      __builtin_trap();
  } catch (const nanovllm::Error&) {
  }
  try {
    const nanovllm::GenerationConfig g = nanovllm::parse_generation_config(text, "fuzz/generation_config.json");
    if (g.top_p && !(*g.top_p > 0 && *g.top_p <= 1)) __builtin_trap();
    if (g.temperature && !(*g.temperature >= 0)) __builtin_trap();
  } catch (const nanovllm::Error&) {
  }
  return 0;
}
