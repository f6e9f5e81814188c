#pragma once
// make-model --quantization: a bf16 decoder linear written as a downloaded quantized checkpoint
// stores it, in exactly the layouts model/quantized_checkpoint.h reads (round to nearest):
//   fp8    per 128 x 128 block scale_inv = max|w| / 448 (bf16, as the Qwen FP8 checkpoints),
//          codes E4M3 of w / scale_inv; tensors weight, weight_scale_inv
//   awq    per group of G along k: scale = (max - min) / 15 (f16), zero = round(-min / scale)
//          in [0, 15], q = clamp(round(w / scale) + zero, 0, 15); tensors qweight, qzeros, scales
//   gptq4  symmetric: scale = 2 max|w| / 15 (f16), zero 8 (stored 7), q = clamp(round(w / scale)
//   gptq8  + zero, 0, maxq); maxq 255, zero 128 (stored 127) for 8 bits; qweight, qzeros,
//          scales, g_idx
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"

namespace nanovllm {

class CheckpointQuantizer {
 public:
  // name: "none", "fp8", "awq", "gptq4", "gptq8" (Error naming them otherwise); group_size: awq /
  // gptq k values per scale (a positive multiple of 8; fp8 ignores it).
  CheckpointQuantizer(const std::string& name, int64_t group_size);

  bool enabled() const { return format_ != Format::None; }
  // config.json's quantization_config as the Qwen team / AutoAWQ / AutoGPTQ write it, with
  // modules_to_not_convert where given.
  nlohmann::ordered_json config_json(const std::vector<std::string>& modules_to_not_convert) const;
  // `config` (a config.json object) with that quantization_config put after
  // num_key_value_heads, where transformers' sorted keys put it (at the end without that key).
  nlohmann::ordered_json with_config(const nlohmann::ordered_json& config,
                                     const std::vector<std::string>& modules_to_not_convert) const;
  // Whether the tensor `name` is a linear the format stores quantized: a "..._proj.weight" whose
  // module no entry of modules_to_not_convert names (a substring, as transformers matches).
  static bool converts(const std::string& name,
                       const std::vector<std::string>& modules_to_not_convert);
  // Error unless every linear [n, k] of these shapes can be written (group divides k, the packed
  // words divide n): names the shape and the option to change.
  void check_shape(const std::string& what, int64_t n, int64_t k) const;
  // The tensors the [n, k] linear `weight_name` (module + ".weight") becomes.
  std::vector<TensorSpec> specs(const std::string& weight_name, int64_t n, int64_t k) const;
  // Their bytes from the bf16 weight w [n, k], in the order of specs().
  std::vector<std::vector<uint8_t>> encode(const uint16_t* w, int64_t n, int64_t k) const;

 private:
  enum class Format : uint8_t { None, Fp8, Awq, Gptq4, Gptq8 };
  std::vector<std::vector<uint8_t>> encode_fp8(const uint16_t* w, int64_t n, int64_t k) const;
  std::vector<std::vector<uint8_t>> encode_awq(const uint16_t* w, int64_t n, int64_t k) const;
  std::vector<std::vector<uint8_t>> encode_gptq(const uint16_t* w, int64_t n, int64_t k) const;
  Format format_ = Format::None;
  int64_t group_ = 128;
};

}  // namespace nanovllm
