#include "model/quantized_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/fp8.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm {

// Named, not anonymous: the library builds in unity batches (see quantization_config.cpp).
namespace quantized_checkpoint_detail {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i of a word holds column 8c + this

std::string dtypes_str(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) s += (s.empty() ? "" : " or ") + std::string(dtype_name(d));
  return s;
}

// The tensor `name` of exactly `shape` and one of `dtypes`; Error naming it otherwise.
const SafetensorsTensor& tensor(const Checkpoint& ckpt, const std::string& name,
                                const std::vector<int64_t>& shape, std::initializer_list<DType> dtypes) {
  const SafetensorsTensor& t = ckpt.get(name, shape);
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end())
    fail("{}: tensor '{}' has dtype {}, expected {}", ckpt.file_of(name), name, dtype_name(t.dtype),
         dtypes_str(dtypes));
  return t;
}

std::vector<int32_t> int32s(const SafetensorsTensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

// f16 / bf16 / f32 values as f32 (exact).
std::vector<float> floats(const SafetensorsTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    switch (t.dtype) {
      case DType::F16:
        std::memcpy(&h, t.data + 2 * i, 2);
        v[i] = f16_to_f32(h);
        break;
      case DType::BF16:
        std::memcpy(&h, t.data + 2 * i, 2);
        v[i] = bf16_to_f32(h);
        break;
      default:
        std::memcpy(&v[i], t.data + 4 * i, 4);
        break;
    }
  }
  return v;
}

// `a` divides by `b`, else an Error naming the module and what the numbers are.
void require_divides(int64_t a, int64_t b, const std::string& module, const char* what_a, const char* what_b) {
  if (b <= 0 || a % b != 0)
    fail("{}: {} {} is not a multiple of {} {}", module, what_a, a, what_b, b);
}

// The quantized tensor `name` must exist; a module stored unquantized in a quantized checkpoint
// gets a message that says how to declare it.
void require_present(const Checkpoint& ckpt, const std::string& module, const std::string& name,
                     const CheckpointQuantization& q) {
  if (ckpt.find(name)) return;
  if (ckpt.find(module + ".weight"))
    fail("{}: tensor '{}' not found, but '{}.weight' is: a {} checkpoint must list unquantized "
         "modules in quantization_config.modules_to_not_convert", ckpt.file_of(module + ".weight"), name,
         module, q.method_name());
  ckpt.get(name, {});  // the Checkpoint's own "not found" message, naming the files
}

// fp8 block-wise -> int8 groups of block_k along k, requantized to nearest.
QuantizedWeight read_fp8(const Checkpoint& ckpt, const CheckpointQuantization& cq,
                         const std::string& module, int64_t n, int64_t k) {
  const std::string wname = module + ".weight", sname = module + ".weight_scale_inv";
  const int64_t bn = cq.block_n, bk = cq.block_k;
  const SafetensorsTensor w = tensor(ckpt, wname, {n, k}, {DType::F8E4M3});
  const int64_t sn = (n + bn - 1) / bn, sk = (k + bk - 1) / bk;
  const std::vector<float> sinv =
      floats(tensor(ckpt, sname, {sn, sk}, {DType::BF16, DType::F16, DType::F32}));
  for (size_t i = 0; i < sinv.size(); ++i) {
    if (!std::isfinite(sinv[i]) || sinv[i] < 0)
      fail("{}: tensor '{}' holds {} at [{}, {}]; block scales must be finite and >= 0",
           ckpt.file_of(sname), sname, sinv[i], int64_t(i) / sk, int64_t(i) % sk);
  }
  QuantizedWeight out = QuantizedWeight::sized({QuantFormat::Int8, bk}, n, k);  // sk groups
  std::vector<float> v(static_cast<size_t>(bk));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < sk; ++g) {
      const int64_t i0 = g * bk, len = std::min(bk, k - i0);
      const float block_scale = sinv[size_t((j / bn) * sk + g)];
      float amax = 0;
      for (int64_t i = 0; i < len; ++i) {
        const uint8_t code = w.data[j * k + i0 + i];
        if ((code & 0x7F) == 0x7F)
          fail("{}: tensor '{}' holds an fp8 NaN at [{}, {}]", ckpt.file_of(wname), wname, j, i0 + i);
        v[size_t(i)] = fp8_e4m3_to_float(code) * block_scale;
        amax = std::max(amax, std::fabs(v[size_t(i)]));
      }
      const float s = amax / 127.0f;
      out.scale[size_t(j * sk + g)] = s;
      for (int64_t i = 0; i < len; ++i) {
        const float r = s > 0 ? std::nearbyint(v[size_t(i)] / s) : 0.0f;
        out.q[size_t(j * k + i0 + i)] = int8_t(std::clamp(r, -127.0f, 127.0f));
      }
    }
  }
  return out;
}

QuantizedWeight read_awq(const Checkpoint& ckpt, const CheckpointQuantization& cq,
                         const std::string& module, int64_t n, int64_t k) {
  const int64_t G = cq.group_size;
  require_divides(n, 8, module, "out_features", "an AWQ word's column count");
  require_divides(k, G, module, "in_features", "quantization_config.group_size");
  const int64_t groups = k / G, words = n / 8;
  require_present(ckpt, module, module + ".qweight", cq);
  const std::vector<int32_t> qweight = int32s(tensor(ckpt, module + ".qweight", {k, words}, {DType::I32}));
  const std::vector<int32_t> qzeros = int32s(tensor(ckpt, module + ".qzeros", {groups, words}, {DType::I32}));
  const std::vector<float> scales =
      floats(tensor(ckpt, module + ".scales", {groups, n}, {DType::F16, DType::BF16, DType::F32}));
  QuantizedWeight out = QuantizedWeight::sized({QuantFormat::Int4, G}, n, k);
  for (int64_t i = 0; i < k; ++i) {  // qweight [k, n/8]: the transposed weight
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t word = uint32_t(qweight[size_t(i * words + c)]);
      for (int b = 0; b < 8; ++b) {
        out.q[size_t((8 * c + kAwqOrder[b]) * k + i)] = int8_t((word >> (4 * b)) & 0xF);
      }
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t word = uint32_t(qzeros[size_t(g * words + c)]);
      for (int b = 0; b < 8; ++b) {
        const int64_t j = 8 * c + kAwqOrder[b];
        out.zero[size_t(j * groups + g)] = float((word >> (4 * b)) & 0xF);
      }
    }
    for (int64_t j = 0; j < n; ++j) out.scale[size_t(j * groups + g)] = scales[size_t(g * n + j)];
  }
  return out;
}

QuantizedWeight read_gptq(const Checkpoint& ckpt, const CheckpointQuantization& cq,
                          const std::string& module, int64_t n, int64_t k) {
  const int bits = cq.bits;
  const int64_t per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t G = cq.group_size ? cq.group_size : k;  // group_size -1: one group over all of k
  require_divides(k, per_word, module, "in_features", "the values per qweight word");
  require_divides(n, per_word, module, "out_features", "the values per qzeros word");
  require_divides(k, G, module, "in_features", "quantization_config.group_size");
  const int64_t groups = k / G;
  require_present(ckpt, module, module + ".qweight", cq);
  const std::vector<int32_t> qweight =
      int32s(tensor(ckpt, module + ".qweight", {k / per_word, n}, {DType::I32}));
  const std::vector<int32_t> qzeros =
      int32s(tensor(ckpt, module + ".qzeros", {groups, n / per_word}, {DType::I32}));
  const std::vector<float> scales =
      floats(tensor(ckpt, module + ".scales", {groups, n}, {DType::F16, DType::BF16, DType::F32}));
  if (ckpt.find(module + ".g_idx")) {
    const std::string name = module + ".g_idx";
    const std::vector<int32_t> g_idx = int32s(tensor(ckpt, name, {k}, {DType::I32}));
    for (int64_t i = 0; i < k; ++i) {
      if (g_idx[size_t(i)] != i / G)
        fail("{}: tensor '{}' maps row {} to group {}, not {} (= row / group_size): act-order "
             "(desc_act) checkpoints are not supported", ckpt.file_of(name), name, i, g_idx[size_t(i)], i / G);
    }
  }
  std::vector<int32_t> zero(static_cast<size_t>(groups * n));  // [groups, n], stored + 1
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < n / per_word; ++c) {
      const uint32_t word = uint32_t(qzeros[size_t(g * (n / per_word) + c)]);
      for (int64_t b = 0; b < per_word; ++b) {
        zero[size_t(g * n + c * per_word + b)] = int32_t((word >> (bits * b)) & mask) + 1;
      }
    }
  }
  QuantizedWeight out = QuantizedWeight::sized(
      bits == 4 ? QuantScheme{QuantFormat::Int4, G}
                : QuantScheme{QuantFormat::Int8, cq.group_size},  // int8 -1: per row
      n, k);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < n; ++j) {
      out.scale[size_t(j * groups + g)] = scales[size_t(g * n + j)];
      if (bits == 4) out.zero[size_t(j * groups + g)] = float(zero[size_t(g * n + j)]);
    }
  }
  for (int64_t r = 0; r < k / per_word; ++r) {  // qweight [k / per_word, n], packed along k
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t word = uint32_t(qweight[size_t(r * n + j)]);
      for (int64_t b = 0; b < per_word; ++b) {
        const int64_t i = r * per_word + b;
        const int32_t code = int32_t((word >> (bits * b)) & mask);
        if (bits == 4) {
          out.q[size_t(j * k + i)] = int8_t(code);
          continue;
        }
        const int32_t q = code - zero[size_t((i / G) * n + j)];
        if (q < -128 || q > 127)
          fail("{}: tensor '{}' code {} at row {}, column {} minus its zero {} ('{}.qzeros') is {}, "
               "outside int8", ckpt.file_of(module + ".qweight"), module + ".qweight", code, i, j,
               zero[size_t((i / G) * n + j)], module, q);
        out.q[size_t(j * k + i)] = int8_t(q);
      }
    }
  }
  return out;
}

// Whether one module is stored quantized (see stored_quantized).
bool module_quantized(const Checkpoint& ckpt, const CheckpointQuantization& q, const std::string& module) {
  if (!q.enabled()) return false;
  if (q.method != CheckpointQuantMethod::Fp8) return !q.not_converted(module);
  const bool listed = q.not_converted(module), scaled = ckpt.find(module + ".weight_scale_inv") != nullptr;
  const SafetensorsTensor* w = ckpt.find(module + ".weight");
  if ((listed || !scaled) && w && w->dtype == DType::F8E4M3)
    fail("{}: tensor '{}.weight' is F8_E4M3 but {}", ckpt.file_of(module + ".weight"), module,
         listed ? "quantization_config.modules_to_not_convert lists the module"
                : fmt::format("'{}.weight_scale_inv' is missing", module));
  return !listed && scaled;
}

}  // namespace quantized_checkpoint_detail

std::string module_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size());
  return weight_name;
}

bool stored_quantized(const Checkpoint& ckpt, const CheckpointQuantization& q,
                      const std::vector<std::string>& modules) {
  using quantized_checkpoint_detail::module_quantized;
  NV_CHECK(!modules.empty(), "stored_quantized of no module");
  const bool first = module_quantized(ckpt, q, modules[0]);
  for (size_t i = 1; i < modules.size(); ++i) {
    if (module_quantized(ckpt, q, modules[i]) != first)
      fail("{}: '{}' is stored {} but '{}' is {}; the weights fused with it must be stored alike",
           q.describe(), modules[0], first ? "quantized" : "unquantized", modules[i],
           first ? "not" : "quantized");
  }
  return first;
}

QuantizedWeight read_quantized_linear(const Checkpoint& ckpt, const CheckpointQuantization& q,
                                      const std::string& module, int64_t n, int64_t k) {
  using namespace quantized_checkpoint_detail;
  QuantizedWeight w;
  switch (q.method) {
    case CheckpointQuantMethod::Fp8: w = read_fp8(ckpt, q, module, n, k); break;
    case CheckpointQuantMethod::Awq: w = read_awq(ckpt, q, module, n, k); break;
    case CheckpointQuantMethod::Gptq: w = read_gptq(ckpt, q, module, n, k); break;
    case CheckpointQuantMethod::None: fail("read_quantized_linear: '{}' of an unquantized checkpoint", module);
  }
  validate(w, module + " (" + q.describe() + ")");
  return w;
}

void check_load_quantization(const CheckpointQuantization& q, QuantScheme requested) {
  if (q.enabled() && requested.enabled())
    fail("the checkpoint is already quantized (config.json quantization_config: {}); load it "
         "without --quantization (asked for {})", q.describe(), quantization_name(requested));
}

}  // namespace nanovllm
