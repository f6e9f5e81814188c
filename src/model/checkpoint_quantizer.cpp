#include "model/checkpoint_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/fp8.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm {

// Named, not anonymous: the library builds in unity batches (see quantization_config.cpp).
namespace checkpoint_quantizer_detail {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i of a word holds column 8c + this

float round_to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// Little-endian bytes of 32-bit words / 16-bit values.
std::vector<uint8_t> words_bytes(const std::vector<uint32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_f16(v[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

}  // namespace checkpoint_quantizer_detail

CheckpointQuantizer::CheckpointQuantizer(const std::string& name, int64_t group_size) : group_(group_size) {
  if (name.empty() || name == "none") {
    format_ = Format::None;
  } else if (name == "fp8") {
    format_ = Format::Fp8;
  } else if (name == "awq") {
    format_ = Format::Awq;
  } else if (name == "gptq4") {
    format_ = Format::Gptq4;
  } else if (name == "gptq8") {
    format_ = Format::Gptq8;
  } else {
    fail("make-model: quantization must be none, fp8, awq, gptq4 or gptq8, got '{}'", name);
  }
  if (format_ != Format::None && format_ != Format::Fp8 && (group_ <= 0 || group_ % 8 != 0))
    fail("make-model: group size must be a positive multiple of 8, got {}", group_);
}

nlohmann::ordered_json CheckpointQuantizer::config_json(const std::vector<std::string>& not_convert) const {
  nlohmann::ordered_json j;
  switch (format_) {
    case Format::None:
      return j;
    case Format::Fp8:  // the Qwen FP8 checkpoints' config
      j["activation_scheme"] = "dynamic";
      j["fmt"] = "e4m3";
      j["quant_method"] = "fp8";
      j["weight_block_size"] = {128, 128};
      if (!not_convert.empty()) j["modules_to_not_convert"] = not_convert;
      return j;
    case Format::Awq:  // AutoAWQ through transformers' AwqConfig
      j["bits"] = 4;
      j["group_size"] = group_;
      j["modules_to_not_convert"] = not_convert.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(not_convert);
      j["quant_method"] = "awq";
      j["version"] = "gemm";
      j["zero_point"] = true;
      return j;
    case Format::Gptq4:
    case Format::Gptq8:  // AutoGPTQ's BaseQuantizeConfig
      j["bits"] = format_ == Format::Gptq4 ? 4 : 8;
      j["checkpoint_format"] = "gptq";
      j["damp_percent"] = 0.01;
      j["desc_act"] = false;
      j["group_size"] = group_;
      j["model_file_base_name"] = nullptr;
      j["model_name_or_path"] = nullptr;
      if (!not_convert.empty()) j["modules_to_not_convert"] = not_convert;
      j["quant_method"] = "gptq";
      j["static_groups"] = false;
      j["sym"] = true;
      j["true_sequential"] = true;
      return j;
  }
  return j;
}

nlohmann::ordered_json CheckpointQuantizer::with_config(
    const nlohmann::ordered_json& config, const std::vector<std::string>& not_convert) const {
  nlohmann::ordered_json with = nlohmann::ordered_json::object();
  for (auto& [key, value] : config.items()) {
    with[key] = value;
    if (key == "num_key_value_heads") with["quantization_config"] = config_json(not_convert);
  }
  if (!with.contains("quantization_config")) with["quantization_config"] = config_json(not_convert);
  return with;
}

bool CheckpointQuantizer::converts(const std::string& name,
                                   const std::vector<std::string>& not_convert) {
  const std::string suffix = "_proj.weight";
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string module = name.substr(0, name.size() - 7);  // less ".weight"
  for (const std::string& m : not_convert)
    if (module.find(m) != std::string::npos) return false;
  return true;
}

void CheckpointQuantizer::check_shape(const std::string& what, int64_t n, int64_t k) const {
  if (format_ == Format::None || format_ == Format::Fp8) return;  // fp8 blocks cover any shape
  const int64_t per_word = format_ == Format::Gptq8 ? 4 : 8;
  if (k % group_ != 0)
    fail("make-model: {} has in_features {}, not a multiple of the group size {} (--group-size)", what, k,
         group_);
  if (n % per_word != 0 || k % per_word != 0)
    fail("make-model: {} [{}, {}] does not pack into words of {} values", what, n, k, per_word);
}

std::vector<TensorSpec> CheckpointQuantizer::specs(const std::string& weight_name, int64_t n, int64_t k) const {
  const std::string m = weight_name.substr(0, weight_name.size() - std::string(".weight").size());
  const int64_t groups = group_ > 0 ? k / group_ : 0;
  switch (format_) {
    case Format::None:
      return {{weight_name, DType::BF16, {n, k}}};
    case Format::Fp8:
      return {{weight_name, DType::F8E4M3, {n, k}},
              {m + ".weight_scale_inv", DType::BF16, {(n + 127) / 128, (k + 127) / 128}}};
    case Format::Awq:
      return {{m + ".qweight", DType::I32, {k, n / 8}},
              {m + ".qzeros", DType::I32, {groups, n / 8}},
              {m + ".scales", DType::F16, {groups, n}}};
    case Format::Gptq4:
    case Format::Gptq8: {
      const int64_t per_word = format_ == Format::Gptq4 ? 8 : 4;
      return {{m + ".qweight", DType::I32, {k / per_word, n}},
              {m + ".qzeros", DType::I32, {groups, n / per_word}},
              {m + ".scales", DType::F16, {groups, n}},
              {m + ".g_idx", DType::I32, {k}}};
    }
  }
  return {};
}

std::vector<std::vector<uint8_t>> CheckpointQuantizer::encode(const uint16_t* w, int64_t n, int64_t k) const {
  switch (format_) {
    case Format::None: {
      std::vector<uint8_t> b(static_cast<size_t>(n * k * 2));
      std::memcpy(b.data(), w, b.size());
      return {b};
    }
    case Format::Fp8: return encode_fp8(w, n, k);
    case Format::Awq: return encode_awq(w, n, k);
    case Format::Gptq4:
    case Format::Gptq8: return encode_gptq(w, n, k);
  }
  return {};
}

// Per 128 x 128 block: scale_inv = max|w| / 448 rounded to bf16, code = e4m3(w / scale_inv).
std::vector<std::vector<uint8_t>> CheckpointQuantizer::encode_fp8(const uint16_t* w, int64_t n, int64_t k) const {
  const int64_t bn = (n + 127) / 128, bk = (k + 127) / 128;
  std::vector<uint8_t> codes(static_cast<size_t>(n * k));
  std::vector<uint8_t> scales(static_cast<size_t>(bn * bk * 2));
  for (int64_t bj = 0; bj < bn; ++bj) {
    for (int64_t bi = 0; bi < bk; ++bi) {
      const int64_t j0 = bj * 128, j1 = std::min(n, j0 + 128), i0 = bi * 128, i1 = std::min(k, i0 + 128);
      float amax = 0;
      for (int64_t j = j0; j < j1; ++j) {
        for (int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(bf16_to_f32(w[j * k + i])));
      }
      const uint16_t s_bits = f32_to_bf16(amax > 0 ? amax / kFp8E4M3Max : 1.0f);
      const float s = bf16_to_f32(s_bits);
      std::memcpy(scales.data() + 2 * (bj * bk + bi), &s_bits, 2);
      for (int64_t j = j0; j < j1; ++j) {
        for (int64_t i = i0; i < i1; ++i) codes[size_t(j * k + i)] = float_to_fp8_e4m3(bf16_to_f32(w[j * k + i]) / s);
      }
    }
  }
  return {codes, scales};
}

// Asymmetric groups along k, packed as AutoAWQ's GEMM kernels read them (transposed, nibbles in
// the order 0, 2, 4, 6, 1, 3, 5, 7).
std::vector<std::vector<uint8_t>> CheckpointQuantizer::encode_awq(const uint16_t* w, int64_t n, int64_t k) const {
  using namespace checkpoint_quantizer_detail;
  const int64_t G = group_, groups = k / G, words = n / 8;
  std::vector<uint8_t> q(static_cast<size_t>(n * k));       // [n, k]
  std::vector<uint8_t> zero(static_cast<size_t>(n * groups));  // [n, groups]
  std::vector<float> scale(static_cast<size_t>(groups * n));   // [groups, n]
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t* v = w + j * k + g * G;
      float lo = bf16_to_f32(v[0]), hi = lo;
      for (int64_t i = 1; i < G; ++i) {
        lo = std::min(lo, bf16_to_f32(v[i]));
        hi = std::max(hi, bf16_to_f32(v[i]));
      }
      const float s = round_to_f16(std::max(hi - lo, 1e-5f) / 15.0f);
      const float z = std::clamp(std::nearbyint(-lo / s), 0.0f, 15.0f);
      scale[size_t(g * n + j)] = s;
      zero[size_t(j * groups + g)] = uint8_t(z);
      for (int64_t i = 0; i < G; ++i)
        q[size_t(j * k + g * G + i)] = uint8_t(std::clamp(std::nearbyint(bf16_to_f32(v[i]) / s) + z, 0.0f, 15.0f));
    }
  }
  std::vector<uint32_t> qweight(static_cast<size_t>(k * words)), qzeros(static_cast<size_t>(groups * words));
  for (int64_t c = 0; c < words; ++c) {
    for (int b = 0; b < 8; ++b) {
      const int64_t j = 8 * c + kAwqOrder[b];
      for (int64_t i = 0; i < k; ++i) qweight[size_t(i * words + c)] |= uint32_t(q[size_t(j * k + i)]) << (4 * b);
      for (int64_t g = 0; g < groups; ++g) qzeros[size_t(g * words + c)] |= uint32_t(zero[size_t(j * groups + g)]) << (4 * b);
    }
  }
  return {words_bytes(qweight), words_bytes(qzeros), f16_bytes(scale)};
}

// Symmetric groups along k (AutoGPTQ sym=True): zero = (maxq + 1) / 2, stored minus 1; qweight
// packed along k, qzeros along n.
std::vector<std::vector<uint8_t>> CheckpointQuantizer::encode_gptq(const uint16_t* w, int64_t n, int64_t k) const {
  using namespace checkpoint_quantizer_detail;
  const int bits = format_ == Format::Gptq4 ? 4 : 8;
  const int64_t per_word = 32 / bits, G = group_, groups = k / G;
  const int maxq = (1 << bits) - 1, zero = (maxq + 1) / 2;
  std::vector<uint32_t> qweight(static_cast<size_t>(k / per_word * n));
  std::vector<uint32_t> qzeros(static_cast<size_t>(groups * n / per_word));
  std::vector<float> scale(static_cast<size_t>(groups * n));  // [groups, n]
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t* v = w + j * k + g * G;
      float amax = 0;
      for (int64_t i = 0; i < G; ++i) amax = std::max(amax, std::fabs(bf16_to_f32(v[i])));
      const float s = round_to_f16(amax > 0 ? 2 * amax / float(maxq) : 2.0f / float(maxq));
      scale[size_t(g * n + j)] = s;
      for (int64_t i = 0; i < G; ++i) {
        const int64_t row = g * G + i;  // along k
        const float q = std::clamp(std::nearbyint(bf16_to_f32(v[i]) / s) + float(zero), 0.0f, float(maxq));
        qweight[size_t((row / per_word) * n + j)] |= uint32_t(q) << (bits * (row % per_word));
      }
      qzeros[size_t(g * (n / per_word) + j / per_word)] |= uint32_t(zero - 1) << (bits * (j % per_word));
    }
  }
  std::vector<uint32_t> g_idx(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) g_idx[size_t(i)] = uint32_t(i / G);
  return {words_bytes(qweight), words_bytes(qzeros), f16_bytes(scale), words_bytes(g_idx)};
}

}  // namespace nanovllm
