#pragma once
// The KV cache's element type and per-layer scales (Config::kv_cache_dtype). bf16 stores k and v
// as they are; fp8 stores E4M3 codes fp8(x / scale) (runtime/fp8.h) and reads code * scale, with
// one k_scale and one v_scale per layer taken from the checkpoint when it has them (vLLM's
// `model.layers.N.self_attn.k_scale` / `.v_scale` scalars), else 1.0. The scales depend on the
// checkpoint only, so a sequence's cached values never depend on its batch.
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace nanovllm {

class Checkpoint;

struct KvCacheFormat {
  DType dtype = DType::BF16;   // BF16 or F8E4M3
  std::vector<float> k_scale;  // [layers]; all 1.0 for bf16
  std::vector<float> v_scale;  // [layers]
};

// "auto" and "bf16" -> BF16, "fp8" -> F8E4M3; anything else: Error.
DType resolve_kv_cache_dtype(const std::string& name);

// The format for `name` over `num_layers` layers; fp8 reads the scales from `checkpoint`
// (Error when one is present but not a positive finite scalar).
KvCacheFormat make_kv_cache_format(const std::string& name, const Checkpoint& checkpoint,
                                   int num_layers);

}  // namespace nanovllm
