#pragma once
// The decoder linears of a quantized checkpoint (model/quantization_config.h), read into the
// unpacked form of runtime/quant.h. For the linear `module` ("model.layers.0.mlp.down_proj"),
// logical weight [n, k] (out = x @ w^T):
//   fp8   module.weight            F8_E4M3 [n, k]
//         module.weight_scale_inv  bf16 / f16 / f32 [ceil(n / 128), ceil(k / 128)]; despite the
//                                  name it multiplies: w = e4m3(code) * scale_inv[j/128][i/128]
//         -> int8, groups of 128 along k: each group of each row requantized to nearest,
//            q in [-127, 127], scale = max|w| / 127
//   awq   module.qweight  I32 [k, n/8]   nibble i of word (i_k, c) is column 8c + {0,2,4,6,1,3,5,7}[i]
//         module.qzeros   I32 [k/G, n/8] packed the same way
//         module.scales   f16 [k/G, n]
//         -> int4, group G: w = (q - zero) * scale (AWQ stores the weight transposed)
//   gptq  module.qweight  I32 [k * b / 32, n]   word (r, j) holds rows r * 32/b + i in bits i*b..
//         module.qzeros   I32 [k/G, n * b / 32] packed along n; the zero is stored + 1 (AutoGPTQ)
//         module.scales   f16 [k/G, n]
//         module.g_idx    I32 [k] (optional), must be i / G (desc_act false)
//         -> b = 4: int4, group G; b = 8: int8, group G with q = code - zero (in [-128, 127])
// Every problem is an Error naming the tensor (or the config field): a missing or mis-shaped
// tensor, a wrong dtype, codes the form cannot hold, a group that does not divide k.
#include <string>
#include <vector>

#include "model/hf_config.h"
#include "model/safetensors.h"
#include "runtime/quant.h"

namespace nanovllm {

// Whether every one of `modules` (the parts of one fused weight: q/k/v, gate/up) is stored
// quantized, or none is; Error naming two that differ. fp8: where module.weight_scale_inv
// exists; awq / gptq: unless modules_to_not_convert lists it. Always false for method none.
bool stored_quantized(const Checkpoint& ckpt, const CheckpointQuantization& q,
                      const std::vector<std::string>& modules);

// The stored linear `module` of logical shape [n, k], checked by validate(). Error as above.
QuantizedWeight read_quantized_linear(const Checkpoint& ckpt, const CheckpointQuantization& q,
                                      const std::string& module, int64_t n, int64_t k);

// Error when quantization at load (`requested`, Config::quantization) is asked of a checkpoint
// that is already quantized.
void check_load_quantization(const CheckpointQuantization& q, QuantScheme requested);

// "model.layers.0.mlp.down_proj.weight" -> "model.layers.0.mlp.down_proj".
std::string module_of(const std::string& weight_name);

}  // namespace nanovllm
