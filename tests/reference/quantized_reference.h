#pragma once
// The decoder linears of a quantized Hugging Face checkpoint (config.json quantization_config:
// fp8 block-wise, awq, gptq) dequantized to f32 straight from the published formulas, for the
// reference forward. Independent of the engine's loader (model/quantized_checkpoint.h): it
// parses quantization_config itself and unpacks the words its own way (AutoAWQ's reverse order,
// AutoGPTQ's g_idx).
//   fp8:  w = e4m3(code) * weight_scale_inv[j / bn][i / bk], then requantized as the engine holds
//         it: per row, per group of bk along k, q = round(w / s) in [-127, 127], s = max|w| / 127
//   awq:  w = (q - z) * s with q, z unpacked from nibble [0, 4, 1, 5, 2, 6, 3, 7][c % 8] of word
//         c / 8 (qweight and qzeros), s = scales; qweight is [k, n]
//   gptq: w = (q - (z + 1)) * s, g = g_idx[i]; qweight packed along k, qzeros along n
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nanovllm::ref {

struct DequantizedLinears {
  // "module.weight" -> f32 [n, k], for every linear the checkpoint stores quantized.
  std::map<std::string, std::vector<float>> weights;
  // Names of the tensors those were read from (qweight, qzeros, scales, g_idx,
  // weight_scale_inv, the fp8 weight): not weights themselves.
  std::vector<std::string> consumed;
  // The 4-bit ones (awq, gptq 4-bit): "module.weight" -> their group along k.
  std::map<std::string, int64_t> int4_group;
};

// Empty when config.json has no quantization_config. Throws std::runtime_error on anything it
// does not understand (the engine's loader gives the user-facing errors).
DequantizedLinears dequantize_checkpoint_linears(const std::string& folder);

}  // namespace nanovllm::ref
