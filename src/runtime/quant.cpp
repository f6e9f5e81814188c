#include "runtime/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>

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
    case QuantFormat::Int8: return s.group ? "int8-g" + std::to_string(s.group) : "int8";
    case QuantFormat::Int4: return "int4-g" + std::to_string(s.group);
  }
  return "?";
}

double quantized_bytes_per_weight(QuantScheme s, int64_t k) {
  switch (s.format) {
    case QuantFormat::None: return 2.0;
    case QuantFormat::Int8: return 1.0 + 4.0 / double(s.group ? s.group : k);  // f32 scales
    case QuantFormat::Int4: return 0.5 + 4.0 / double(s.group ? s.group : k);  // f16 scale, zero
  }
  return 2.0;
}

int64_t QuantizedWeight::groups() const { return scheme.group ? (k + scheme.group - 1) / scheme.group : 1; }

int64_t QuantizedWeight::group_size() const { return scheme.group ? scheme.group : k; }

QuantizedWeight QuantizedWeight::sized(QuantScheme scheme, int64_t n, int64_t k) {
  QuantizedWeight w;
  w.scheme = scheme;
  w.n = n;
  w.k = k;
  w.q.resize(size_t(n * k));
  w.scale.resize(size_t(n * w.groups()));
  if (scheme.format == QuantFormat::Int4) w.zero.resize(size_t(n * w.groups()));
  return w;
}

float QuantizedWeight::dequantize(int64_t j, int64_t i) const {
  const int64_t g = j * groups() + i / group_size();
  const float code = float(q[size_t(j * k + i)]);
  return scheme.format == QuantFormat::Int4 ? (code - zero[size_t(g)]) * scale[size_t(g)]
                                            : code * scale[size_t(g)];
}

namespace {

float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// std::nearbyint for |v| < 2^22 under the default rounding mode (to nearest, ties to even), in
// two additions the compiler keeps in line: adding 1.5 * 2^23 leaves no fraction bits, so the
// sum rounds v to an integer and subtracting it back is exact (IEEE order: no -ffast-math here).
// libm's nearbyintf, a call per weight, was most of a quantized load (int8 Qwen3-0.6B: about 40%
// of a 400-token run's CPU time). The callers' |v| is at most 127 (int8) or about 2 * 2048 (int4:
// the zero point is bounded by 2048). The empty asm makes v a rounded float first, so that an
// FMA-capable build cannot fuse the caller's product into the first addition.
inline float round_even(float v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(v));
#endif
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23, even
  return (v + kMagic) - kMagic;
}

// max |w[i]| of finite values: for them the magnitude orders as its bits do, and an integer
// maximum vectorizes (a float one does not without -ffinite-math-only).
float max_abs(const float* w, int64_t k) {
  uint32_t m = 0;
  for (int64_t i = 0; i < k; ++i) {
    uint32_t b;
    std::memcpy(&b, w + i, 4);
    m = std::max(m, b & 0x7fffffffu);
  }
  float r;
  std::memcpy(&r, &m, 4);
  return r;
}

// One row, symmetric: s = max|w| / 127.
void quantize_row_int8(const float* w, int64_t k, int8_t* q, float* scale) {
  const float amax = max_abs(w, k);
  const float s = amax / 127.0f;
  *scale = s;
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    q[i] = int8_t(std::clamp(round_even(w[i] * inv), -127.0f, 127.0f));
  }
}

// One group, asymmetric: scale (max - min) / 15 and zero -min / scale, both rounded to f16
// first, so the codes are chosen against the values the kernels use. The scale is at least
// max|w| / 2048, which keeps |zero| <= 2048 (f16 integers are exact up to there) for a group far
// from 0 relative to its spread; such a group then rounds to within max|w| / 4096.
void quantize_group_int4(const float* w, int64_t n, int8_t* q, float* scale, float* zero) {
  float lo = w[0], hi = w[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  const float amax = std::max(std::fabs(lo), std::fabs(hi));
  const float s = round_f16(std::max((hi - lo) / 15.0f, amax / 2048.0f));
  const float z = s > 0 ? round_f16(-lo / s) : 0.0f;
  *scale = s;
  *zero = z;
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    q[i] = int8_t(std::clamp(round_even(w[i] * inv + z), 0.0f, 15.0f));
  }
}

}  // namespace

QuantizedWeight quantize_rtn(const uint16_t* w, int64_t n, int64_t k, QuantScheme scheme,
                             const std::string& what) {
  NV_CHECK(scheme.enabled() && n >= 0 && k > 0 && scheme.group % 8 == 0 &&
               (scheme.group > 0 || scheme.format == QuantFormat::Int8),
           "quantize_rtn of [{}, {}] in {}", n, k, quantization_name(scheme));
  QuantizedWeight out = QuantizedWeight::sized(scheme, n, k);
  const int64_t groups = out.groups(), gs = out.group_size();
  // Rows [j0, j1), each independent of the others.
  auto quantize_rows = [&](int64_t j0, int64_t j1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = j0; j < j1; ++j) {
      // A bf16 is infinite or NaN when its exponent bits are all ones: one vectorized pass
      // over the bits, then the conversion.
      const uint16_t* wj = w + j * k;
      bool finite = true;
      for (int64_t i = 0; i < k; ++i) finite &= (wj[i] & 0x7f80) != 0x7f80;
      if (!finite) {
        for (int64_t i = 0; i < k; ++i) {
          if (!std::isfinite(bf16_to_f32(wj[i]))) {
            fail("{}: value {} at [{}, {}] is not finite; it cannot be quantized", what,
                 bf16_to_f32(wj[i]), j, i);
          }
        }
      }
      for (int64_t i = 0; i < k; ++i) row[size_t(i)] = bf16_to_f32(wj[i]);
      int8_t* q = out.q.data() + j * k;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t i0 = g * gs, len = std::min(gs, k - i0);
        if (scheme.format == QuantFormat::Int8) {
          quantize_row_int8(row.data() + i0, len, q + i0, &out.scale[size_t(j * groups + g)]);
        } else {
          quantize_group_int4(row.data() + i0, len, q + i0, &out.scale[size_t(j * groups + g)],
                              &out.zero[size_t(j * groups + g)]);
        }
      }
    }
  };
  // A large weight on up to 8 threads of its own (load time: Qwen3-0.6B's int8 load took 1.9 s
  // longer than bf16 on one thread). Contiguous row ranges, so the first range's error is the
  // first row's: the same message however many threads ran.
  const int64_t threads = n * k < (int64_t(1) << 20) ? 1
                          : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto run = [&](int64_t t) {
    try {
      quantize_rows(n * t / threads, n * (t + 1) / threads);
    } catch (...) {
      errors[size_t(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < threads; ++t) helpers.emplace_back(run, t);
  run(0);
  for (std::thread& h : helpers) h.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

void validate(const QuantizedWeight& w, const std::string& what) {
  const bool int4 = w.scheme.format == QuantFormat::Int4;
  if (!w.scheme.enabled() || w.scheme.group < 0 || w.scheme.group % 8 != 0 ||
      (int4 && w.scheme.group == 0) || w.scheme.group > (int4 ? 4096 : 512) || w.n <= 0 || w.k <= 0) {
    fail("{}: quantized [{}, {}] in {}: unsupported shape or group size (groups: multiples of 8, "
         "int8 up to 512, int4 from 8 up to 4096)", what, w.n, w.k, quantization_name(w.scheme));
  }
  const size_t cells = size_t(w.n * w.groups());
  if (w.q.size() != size_t(w.n * w.k) || w.scale.size() != cells || w.zero.size() != (int4 ? cells : 0)) {
    fail("{}: {} codes, {} scales, {} zeros for [{}, {}] in {}", what, w.q.size(), w.scale.size(),
         w.zero.size(), w.n, w.k, quantization_name(w.scheme));
  }
  for (size_t i = 0; i < w.q.size(); ++i) {
    if (int4 && (w.q[i] < 0 || w.q[i] > 15)) {
      fail("{}: int4 code {} at [{}, {}] outside [0, 15]", what, int(w.q[i]), i / size_t(w.k), i % size_t(w.k));
    }
  }
  for (size_t i = 0; i < cells; ++i) {
    const float s = w.scale[i];
    if (!std::isfinite(s) || (int4 && (s != round_f16(s) || w.zero[i] != round_f16(w.zero[i]) ||
                                        !std::isfinite(w.zero[i])))) {
      fail("{}: scale {}{} of row {} group {} is not {}", what, s,
           int4 ? fmt::format(" / zero {}", w.zero[i]) : std::string(), i / size_t(w.groups()),
           i % size_t(w.groups()), int4 ? "a finite f16 value" : "finite");
    }
  }
}

QuantizedWeight stack_rows(const std::vector<QuantizedWeight>& parts) {
  NV_CHECK(!parts.empty(), "stack_rows of nothing");
  QuantizedWeight out;
  out.scheme = parts[0].scheme;
  out.k = parts[0].k;
  for (const QuantizedWeight& p : parts) {
    NV_CHECK(p.k == out.k && p.scheme.format == out.scheme.format && p.scheme.group == out.scheme.group,
             "stack_rows of [{}, {}] {} onto k {} {}", p.n, p.k, quantization_name(p.scheme), out.k,
             quantization_name(out.scheme));
    out.n += p.n;
    out.q.insert(out.q.end(), p.q.begin(), p.q.end());
    out.scale.insert(out.scale.end(), p.scale.begin(), p.scale.end());
    out.zero.insert(out.zero.end(), p.zero.begin(), p.zero.end());
  }
  return out;
}

QuantizedWeight slice_rows(const QuantizedWeight& w, int64_t r0, int64_t r1) {
  NV_CHECK(0 <= r0 && r0 < r1 && r1 <= w.n, "slice_rows [{}, {}) of n = {}", r0, r1, w.n);
  QuantizedWeight out;
  out.scheme = w.scheme;
  out.n = r1 - r0;
  out.k = w.k;
  const int64_t g = w.groups();
  out.q.assign(w.q.begin() + r0 * w.k, w.q.begin() + r1 * w.k);
  out.scale.assign(w.scale.begin() + r0 * g, w.scale.begin() + r1 * g);
  if (!w.zero.empty()) out.zero.assign(w.zero.begin() + r0 * g, w.zero.begin() + r1 * g);
  return out;
}

QuantizedWeight slice_cols(const QuantizedWeight& w, int64_t c0, int64_t c1, const std::string& what) {
  NV_CHECK(0 <= c0 && c0 < c1 && c1 <= w.k, "slice_cols [{}, {}) of k = {}", c0, c1, w.k);
  const int64_t group = w.scheme.group;
  if (group && (c0 % group != 0 || (c1 % group != 0 && c1 != w.k))) {
    fail("tensor parallelism: {} shard columns [{}, {}) of {} do not start and end on {} group "
         "boundaries (group {}); use another tensor_parallel_size or group size", what, c0, c1, w.k,
         w.scheme.format == QuantFormat::Int4 ? "int4" : "int8", group);
  }
  QuantizedWeight out;
  out.scheme = w.scheme;
  out.n = w.n;
  out.k = c1 - c0;
  out.q.resize(size_t(out.n * out.k));
  for (int64_t j = 0; j < w.n; ++j) {
    std::copy_n(w.q.data() + j * w.k + c0, out.k, out.q.data() + j * out.k);
  }
  if (!group) {  // per row: the whole row's scale
    out.scale = w.scale;
    return out;
  }
  const int64_t g0 = c0 / group, ng = out.groups(), wg = w.groups();
  out.scale.resize(size_t(w.n * ng));
  if (!w.zero.empty()) out.zero.resize(size_t(w.n * ng));
  for (int64_t j = 0; j < w.n; ++j) {
    std::copy_n(w.scale.data() + j * wg + g0, ng, out.scale.data() + j * ng);
    if (!w.zero.empty()) std::copy_n(w.zero.data() + j * wg + g0, ng, out.zero.data() + j * ng);
  }
  return out;
}

}  // namespace nanovllm
