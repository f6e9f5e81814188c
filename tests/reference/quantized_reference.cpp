#include "reference/quantized_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/safetensors.h"
#include "runtime/fp8.h"
#include "runtime/tensor.h"

namespace nanovllm::ref {

namespace {

using Vec = std::vector<float>;

[[noreturn]] void refuse(const std::string& what) {
  throw std::runtime_error("quantized reference: " + what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const SafetensorsTensor& get(const Checkpoint& ckpt, const std::string& name) {
  const SafetensorsTensor* t = ckpt.find(name);
  if (!t) refuse("no tensor " + name);
  return *t;
}

// Element e of an I32 tensor, as the unsigned word.
uint32_t word(const SafetensorsTensor& t, int64_t e) {
  if (t.dtype != DType::I32) refuse(t.name + " is not I32");
  uint32_t w;
  std::memcpy(&w, t.data + 4 * e, 4);
  return w;
}

float value(const SafetensorsTensor& t, int64_t e) {
  uint16_t h;
  float f;
  switch (t.dtype) {
    case DType::F16: std::memcpy(&h, t.data + 2 * e, 2); return f16_to_f32(h);
    case DType::BF16: std::memcpy(&h, t.data + 2 * e, 2); return bf16_to_f32(h);
    case DType::F32: std::memcpy(&f, t.data + 4 * e, 4); return f;
    default: refuse(t.name + " is not a float tensor");
  }
}

// AutoAWQ's unpacking: shifts 0, 4, ..., 28 give nibbles 0..7, reordered by AWQ_REVERSE_ORDER.
constexpr int kAwqReverseOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};

uint32_t awq_nibble(const SafetensorsTensor& t, int64_t row, int64_t col, int64_t cols) {
  const uint32_t w = word(t, row * (cols / 8) + col / 8);
  return (w >> (4 * kAwqReverseOrder[col % 8])) & 0xF;
}

Vec awq(const Checkpoint& ckpt, const std::string& m) {
  const SafetensorsTensor qw = get(ckpt, m + ".qweight");  // [k, n / 8]
  const SafetensorsTensor qz = get(ckpt, m + ".qzeros");   // [k / G, n / 8]
  const SafetensorsTensor sc = get(ckpt, m + ".scales");   // [k / G, n]
  const int64_t k = qw.shape[0], n = qw.shape[1] * 8, G = k / qz.shape[0];
  Vec w(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t g = i / G;
      const float q = float(awq_nibble(qw, i, j, n)), z = float(awq_nibble(qz, g, j, n));
      w[size_t(j * k + i)] = (q - z) * value(sc, g * n + j);
    }
  }
  return w;
}

Vec gptq(const Checkpoint& ckpt, const std::string& m, int bits) {
  const SafetensorsTensor qw = get(ckpt, m + ".qweight");  // [k * bits / 32, n]
  const SafetensorsTensor qz = get(ckpt, m + ".qzeros");   // [groups, n * bits / 32]
  const SafetensorsTensor sc = get(ckpt, m + ".scales");   // [groups, n]
  const SafetensorsTensor* gi = ckpt.find(m + ".g_idx");    // [k]
  const int64_t per = 32 / bits, n = sc.shape[1], k = qw.shape[0] * per, groups = sc.shape[0];
  const uint32_t mask = (1u << bits) - 1;
  Vec w(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < k; ++i) {
    const int64_t g = gi ? int64_t(int32_t(word(*gi, i))) : i / (k / groups);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t q = (word(qw, (i / per) * n + j) >> (bits * (i % per))) & mask;
      const int64_t z = ((word(qz, g * (n / per) + j / per) >> (bits * (j % per))) & mask) + 1;
      w[size_t(j * k + i)] = float(q - z) * value(sc, g * n + j);
    }
  }
  return w;
}

// Block-wise fp8, then the engine's int8 requantization per row and group of bk along k.
Vec fp8(const Checkpoint& ckpt, const std::string& m, int64_t bn, int64_t bk) {
  const SafetensorsTensor wt = get(ckpt, m + ".weight");
  const SafetensorsTensor si = get(ckpt, m + ".weight_scale_inv");
  if (wt.dtype != DType::F8E4M3) refuse(m + ".weight is not F8_E4M3");
  const int64_t n = wt.shape[0], k = wt.shape[1], sk = si.shape[1];
  Vec w(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i)
      w[size_t(j * k + i)] = fp8_e4m3_to_float(wt.data[j * k + i]) * value(si, (j / bn) * sk + i / bk);
    for (int64_t i0 = 0; i0 < k; i0 += bk) {
      const int64_t i1 = std::min(k, i0 + bk);
      float amax = 0;
      for (int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(w[size_t(j * k + i)]));
      const float s = amax / 127.0f;
      for (int64_t i = i0; i < i1; ++i) {
        float& x = w[size_t(j * k + i)];
        x = s > 0 ? std::clamp(std::nearbyint(x / s), -127.0f, 127.0f) * s : 0.0f;
      }
    }
  }
  return w;
}

}  // namespace

DequantizedLinears dequantize_checkpoint_linears(const std::string& folder) {
  std::ifstream f(std::filesystem::path(folder) / "config.json");
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json config = nlohmann::json::parse(text.str());
  DequantizedLinears out;
  if (!config.contains("quantization_config") || config["quantization_config"].is_null()) return out;
  const nlohmann::json& q = config["quantization_config"];
  const std::string method = q.at("quant_method").get<std::string>();
  std::vector<std::string> not_convert;
  if (q.contains("modules_to_not_convert") && q["modules_to_not_convert"].is_array())
    not_convert = q["modules_to_not_convert"].get<std::vector<std::string>>();
  Checkpoint ckpt(folder);
  for (const std::string& name : ckpt.names()) {
    const bool packed = ends_with(name, ".qweight"), block = ends_with(name, ".weight_scale_inv");
    if (method == "fp8" ? !block : !packed) continue;
    const std::string m = name.substr(0, name.rfind('.'));
    bool listed = false;
    for (const std::string& s : not_convert) listed |= m.find(s) != std::string::npos;
    if (listed) continue;
    // The group along k of a 4-bit weight: k / the scales' rows.
    auto group = [&](const Vec& w) {
      const SafetensorsTensor sc = get(ckpt, m + ".scales");  // [groups, n]
      return int64_t(w.size()) / sc.shape[1] / sc.shape[0];
    };
    if (method == "awq") {
      Vec& w = out.weights[m + ".weight"] = awq(ckpt, m);
      out.int4_group[m + ".weight"] = group(w);
      for (const char* s : {".qweight", ".qzeros", ".scales"}) out.consumed.push_back(m + s);
    } else if (method == "gptq") {
      const int bits = q.at("bits").get<int>();
      Vec& w = out.weights[m + ".weight"] = gptq(ckpt, m, bits);
      if (bits == 4) out.int4_group[m + ".weight"] = group(w);
      for (const char* s : {".qweight", ".qzeros", ".scales", ".g_idx"}) out.consumed.push_back(m + s);
    } else if (method == "fp8") {
      const auto block_size = q.at("weight_block_size").get<std::vector<int64_t>>();
      out.weights[m + ".weight"] = fp8(ckpt, m, block_size.at(0), block_size.at(1));
      out.consumed.push_back(m + ".weight_scale_inv");
    } else {
      refuse("quant_method " + method);
    }
  }
  return out;
}

}  // namespace nanovllm::ref
