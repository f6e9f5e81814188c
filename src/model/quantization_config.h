#pragma once
// config.json's `quantization_config`: how a downloaded checkpoint stores its decoder linears.
// Supported (everything else is an Error naming the field):
//   fp8   block-wise E4M3 (the Qwen FP8 checkpoints, transformers' FineGrainedFP8Config):
//         fmt "e4m3", weight_block_size [128, 128], activation_scheme "dynamic"
//   awq   AutoAWQ GEMM: bits 4, zero_point true, version "gemm", group_size a multiple of 8
//   gptq  AutoGPTQ: bits 4 or 8, sym true, desc_act false, checkpoint_format "gptq",
//         group_size a multiple of 8 or -1 (one group over all of k)
// The tensors each method stores are read by model/quantized_checkpoint.h.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nanovllm {

enum class CheckpointQuantMethod : uint8_t { None, Fp8, Awq, Gptq };

struct CheckpointQuantization {
  CheckpointQuantMethod method = CheckpointQuantMethod::None;
  int bits = 0;              // fp8: 8; awq: 4; gptq: 4 or 8
  int64_t group_size = 0;    // awq / gptq: k values per scale; gptq -1 is 0 (all of k)
  int64_t block_n = 0;       // fp8: weight_block_size [block_n, block_k]
  int64_t block_k = 0;
  // Modules kept unquantized (modules_to_not_convert; fp8 also ignored_layers). A module whose
  // name contains an entry is skipped, as transformers matches them.
  std::vector<std::string> modules_to_not_convert;

  bool enabled() const { return method != CheckpointQuantMethod::None; }
  bool not_converted(const std::string& module) const;
  std::string method_name() const;  // "fp8", "awq", "gptq"; "none"
  std::string describe() const;     // "gptq 4-bit, group 128"
};

// Parses the quantization_config object of config.json (`path` for messages). Throws Error
// naming the field (quantization_config.bits, ...) and the accepted values.
CheckpointQuantization parse_quantization_config(const nlohmann::json& q, const std::string& path);

}  // namespace nanovllm
