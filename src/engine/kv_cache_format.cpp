#include "engine/kv_cache_format.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "model/safetensors.h"
#include "util/check.h"

namespace nanovllm {

namespace {

// A scalar (shape [] or [1]) of dtype f32, bf16 or f16 from the checkpoint; 1.0 when absent.
float read_scale(const Checkpoint& checkpoint, const std::string& name) {
  const SafetensorsTensor* t = checkpoint.find(name);
  if (!t) return 1.0f;
  if (t->numel() != 1)
    fail("{}: KV cache scale '{}' must be a scalar, got {} values", checkpoint.file_of(name), name,
         t->numel());
  float x = 0.0f;
  uint16_t h = 0;
  switch (t->dtype) {
    case DType::F32: std::memcpy(&x, t->data, 4); break;
    case DType::BF16: std::memcpy(&h, t->data, 2); x = bf16_to_f32(h); break;
    case DType::F16: std::memcpy(&h, t->data, 2); x = f16_to_f32(h); break;
    default:
      fail("{}: KV cache scale '{}' has dtype {}; expected f32, bf16 or f16",
           checkpoint.file_of(name), name, dtype_name(t->dtype));
  }
  if (!std::isfinite(x) || x <= 0.0f)
    fail("{}: KV cache scale '{}' is {}; it must be positive and finite", checkpoint.file_of(name),
         name, x);
  return x;
}

}  // namespace

DType resolve_kv_cache_dtype(const std::string& name) {
  if (name == "auto" || name == "bf16") return DType::BF16;
  if (name == "fp8") return DType::F8E4M3;
  fail("kv_cache_dtype must be auto, bf16 or fp8, got '{}'", name);
}

KvCacheFormat make_kv_cache_format(const std::string& name, const Checkpoint& checkpoint,
                                   int num_layers) {
  KvCacheFormat f;
  f.dtype = resolve_kv_cache_dtype(name);
  f.k_scale.assign(size_t(num_layers), 1.0f);
  f.v_scale.assign(size_t(num_layers), 1.0f);
  if (f.dtype != DType::F8E4M3) return f;
  for (int l = 0; l < num_layers; ++l) {
    const std::string prefix = fmt::format("model.layers.{}.self_attn.", l);
    f.k_scale[size_t(l)] = read_scale(checkpoint, prefix + "k_scale");
    f.v_scale[size_t(l)] = read_scale(checkpoint, prefix + "v_scale");
  }
  return f;
}

}  // namespace nanovllm
