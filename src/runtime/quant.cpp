#include "runtime/quant.h"

#include <algorithm>
#include <cmath>

#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm {

QuantScheme parse_quantization(const std::string& name) {
  if (name.empty() || name == "none") return {};
  if (name == "int8") return {QuantFormat::Int8, 0};
  if (name == "int4") return {QuantFormat::Int4, kDefaultInt4Group};
  for (int64_t g : {32, 64, 128}) {
    if (name == "int4-g" + std::to_string(g)) return {QuantFormat::Int4, g};
  }
  fail("quantization must be none, int8, int4, int4-g32, int4-g64 or int4-g128, got '{}'", name);
}

std::string quantization_name(QuantScheme s) {
  switch (s.format) {
    case QuantFormat::None: return "none";
    case QuantFormat::Int8: return "int8";
    case QuantFormat::Int4: return "int4-g" + std::to_string(s.group);
  }
  return "?";
}

double quantized_bytes_per_weight(QuantScheme s, int64_t k) {
  switch (s.format) {
    case QuantFormat::None: return 2.0;
    case QuantFormat::Int8: return 1.0 + 4.0 / double(k);
    case QuantFormat::Int4: return 0.5 + 4.0 / double(s.group);  // f16 scale and min
  }
  return 2.0;
}

int64_t QuantizedWeight::groups() const {
  return scheme.format == QuantFormat::Int4 ? (k + scheme.group - 1) / scheme.group : 1;
}

int64_t QuantizedWeight::group_size() const {
  return scheme.format == QuantFormat::Int4 ? scheme.group : k;
}

float QuantizedWeight::dequantize(int64_t j, int64_t i) const {
  const int64_t g = j * groups() + i / group_size();
  const float v = float(q[size_t(j * k + i)]) * scale[size_t(g)];
  return scheme.format == QuantFormat::Int4 ? v + min[size_t(g)] : v;
}

namespace {

float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// One row, symmetric: s = max|w| / 127.
void quantize_row_int8(const float* w, int64_t k, int8_t* q, float* scale) {
  float amax = 0;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(w[i]));
  const float s = amax / 127.0f;
  *scale = s;
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    q[i] = int8_t(std::clamp(std::nearbyint(w[i] * inv), -127.0f, 127.0f));
  }
}

// One group, asymmetric: min and (max - min) / 15, both rounded to f16 first, so the codes
// are chosen against the values the kernels will use.
void quantize_group_int4(const float* w, int64_t n, int8_t* q, float* scale, float* min) {
  float lo = w[0], hi = w[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  const float m = round_f16(lo);
  const float s = round_f16((hi - m) / 15.0f);
  *scale = s;
  *min = m;
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    q[i] = int8_t(std::clamp(std::nearbyint((w[i] - m) * inv), 0.0f, 15.0f));
  }
}

}  // namespace

QuantizedWeight quantize_rtn(const uint16_t* w, int64_t n, int64_t k, QuantScheme scheme,
                             const std::string& what) {
  NV_CHECK(scheme.enabled() && n >= 0 && k > 0, "quantize_rtn of [{}, {}]", n, k);
  QuantizedWeight out;
  out.scheme = scheme;
  out.n = n;
  out.k = k;
  const int64_t groups = out.groups(), gs = out.group_size();
  out.q.resize(size_t(n * k));
  out.scale.resize(size_t(n * groups));
  if (scheme.format == QuantFormat::Int4) out.min.resize(size_t(n * groups));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i) {
      row[size_t(i)] = bf16_to_f32(w[j * k + i]);
      if (!std::isfinite(row[size_t(i)])) {
        fail("{}: value {} at [{}, {}] is not finite; it cannot be quantized", what,
             row[size_t(i)], j, i);
      }
    }
    int8_t* q = out.q.data() + j * k;
    if (scheme.format == QuantFormat::Int8) {
      quantize_row_int8(row.data(), k, q, &out.scale[size_t(j)]);
      continue;
    }
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i0 = g * gs, len = std::min(gs, k - i0);
      quantize_group_int4(row.data() + i0, len, q + i0, &out.scale[size_t(j * groups + g)],
                          &out.min[size_t(j * groups + g)]);
    }
  }
  return out;
}

QuantizedWeight slice_cols(const QuantizedWeight& w, int64_t c0, int64_t c1, const std::string& what) {
  NV_CHECK(0 <= c0 && c0 < c1 && c1 <= w.k, "slice_cols [{}, {}) of k = {}", c0, c1, w.k);
  const bool int4 = w.scheme.format == QuantFormat::Int4;
  if (int4 && (c0 % w.scheme.group != 0 || (c1 % w.scheme.group != 0 && c1 != w.k))) {
    fail("tensor parallelism: {} shard columns [{}, {}) of {} do not start and end on int4 group "
         "boundaries (group {}); use another tensor_parallel_size or int4 group", what, c0, c1,
         w.k, w.scheme.group);
  }
  QuantizedWeight out;
  out.scheme = w.scheme;
  out.n = w.n;
  out.k = c1 - c0;
  out.q.resize(size_t(out.n * out.k));
  for (int64_t j = 0; j < w.n; ++j) {
    std::copy_n(w.q.data() + j * w.k + c0, out.k, out.q.data() + j * out.k);
  }
  if (!int4) {
    out.scale = w.scale;
    return out;
  }
  const int64_t g0 = c0 / w.scheme.group, ng = out.groups(), wg = w.groups();
  out.scale.resize(size_t(w.n * ng));
  out.min.resize(size_t(w.n * ng));
  for (int64_t j = 0; j < w.n; ++j) {
    std::copy_n(w.scale.data() + j * wg + g0, ng, out.scale.data() + j * ng);
    std::copy_n(w.min.data() + j * wg + g0, ng, out.min.data() + j * ng);
  }
  return out;
}

}  // namespace nanovllm
