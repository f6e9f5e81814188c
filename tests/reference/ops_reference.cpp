#include "reference/ops_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "reference/sampler_reference.h"
#include "runtime/fp8.h"
#include "runtime/sampling_rng.h"
#include "util/check.h"

namespace nanovllm::ref {

float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

Vec round_bf16(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = round_bf16(x[i]);
  return y;
}

Vec round_int16_grid(const Vec& x) {
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float s = amax / 16383.0f;
  if (s == 0) return x;
  Vec y = x;
  for (float& v : y) v = std::nearbyint(v * (1.0f / s)) * s;
  return y;
}

Vec round_int8_groups(const Vec& x, int64_t group) {
  Vec y = x;
  for (size_t i0 = 0; i0 < y.size(); i0 += size_t(group)) {
    const size_t i1 = std::min(y.size(), i0 + size_t(group));
    float amax = 0;
    for (size_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(y[i]));
    const float s = amax / 127.0f;
    if (s == 0) continue;
    for (size_t i = i0; i < i1; ++i) y[i] = std::nearbyint(y[i] * (1.0f / s)) * s;
  }
  return y;
}

Vec embedding(const std::vector<int32_t>& ids, const Vec& table, int64_t hidden) {
  Vec out(ids.size() * size_t(hidden));
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t j = 0; j < hidden; ++j)
      out[t * size_t(hidden) + size_t(j)] = table[size_t(ids[t] * hidden + j)];
  return out;
}

Vec vocab_parallel_embedding(const std::vector<int32_t>& ids, const Vec& table, int64_t hidden,
                             int64_t vocab_start, int64_t rows) {
  Vec out(ids.size() * size_t(hidden), 0.0f);
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < vocab_start || ids[t] >= vocab_start + rows) continue;
    for (int64_t j = 0; j < hidden; ++j)
      out[t * size_t(hidden) + size_t(j)] = table[size_t(ids[t] * hidden + j)];
  }
  return out;
}

Vec linear(const Vec& x, const Vec& w, const Vec& bias, int64_t m, int64_t n, int64_t k) {
  Vec out(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias.empty() ? 0.0 : bias[size_t(j)];
      for (int64_t p = 0; p < k; ++p) acc += double(x[size_t(i * k + p)]) * w[size_t(j * k + p)];
      out[size_t(i * n + j)] = float(acc);
    }
  return out;
}

Vec rms_norm(const Vec& x, const Vec& weight, int64_t rows, int64_t d, float eps) {
  Vec out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[size_t(r * d + i)]) * x[size_t(r * d + i)];
    const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
    for (int64_t i = 0; i < d; ++i)
      out[size_t(r * d + i)] = float(x[size_t(r * d + i)] * inv * weight[size_t(i)]);
  }
  return out;
}

void add_rms_norm(Vec& x, Vec& residual, const Vec& weight, int64_t rows, int64_t d, float eps) {
  for (size_t i = 0; i < x.size(); ++i) residual[i] += x[i];
  x = rms_norm(residual, weight, rows, d, eps);
}

Vec rope_cos_sin(int64_t max_pos, int64_t d, double theta) {
  const int64_t half = d / 2;
  Vec cs(size_t(max_pos * d));
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(theta, -2.0 * double(i) / double(d));
      cs[size_t(p * d + i)] = float(std::cos(angle));
      cs[size_t(p * d + half + i)] = float(std::sin(angle));
    }
  return cs;
}

void rope(Vec& x, const std::vector<int32_t>& positions, const Vec& cos_sin, int64_t heads,
          int64_t d) {
  const int64_t half = d / 2;
  for (size_t t = 0; t < positions.size(); ++t) {
    const float* c = &cos_sin[size_t(positions[t] * d)];
    const float* s = c + half;
    for (int64_t h = 0; h < heads; ++h) {
      float* row = &x[(t * size_t(heads) + size_t(h)) * size_t(d)];
      for (int64_t i = 0; i < half; ++i) {
        const double a = row[i], b = row[i + half];
        row[i] = float(a * c[i] - b * s[i]);
        row[i + half] = float(b * c[i] + a * s[i]);
      }
    }
  }
}

Vec silu_and_mul(const Vec& x, int64_t tokens, int64_t n) {
  Vec out(size_t(tokens * n));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n; ++i) {
      const double g = x[size_t(t * 2 * n + i)], u = x[size_t(t * 2 * n + n + i)];
      out[size_t(t * n + i)] = float(g / (1.0 + std::exp(-g)) * u);
    }
  return out;
}

Vec gather_rows(const Vec& x, const std::vector<int32_t>& indices, int64_t cols) {
  Vec out;
  for (int32_t i : indices) out.insert(out.end(), x.begin() + i * cols, x.begin() + (i + 1) * cols);
  return out;
}

Vec attention(const Vec& q, const Vec& k_in, const Vec& v_in, int64_t seqlen_q, int64_t context_len,
              int64_t hq, int64_t hkv, int64_t d, float scale, const Fp8KvScales* fp8,
              int64_t sliding_window) {
  NV_CHECK(context_len >= seqlen_q && hq % hkv == 0 && sliding_window >= 0);
  Vec k = k_in, v = v_in;
  if (fp8) {
    for (float& x : k) x = fp8_e4m3_to_float(float_to_fp8_e4m3(x / fp8->k_scale)) * fp8->k_scale;
    for (float& x : v) x = fp8_e4m3_to_float(float_to_fp8_e4m3(x / fp8->v_scale)) * fp8->v_scale;
  }
  Vec out(size_t(seqlen_q * hq * d));
  std::vector<double> w(static_cast<size_t>(context_len));
  for (int64_t i = 0; i < seqlen_q; ++i) {
    const int64_t pos = context_len - seqlen_q + i;
    // keys (pos - sliding_window, pos] under a sliding window, else [0, pos]
    const int64_t first = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hkv);
      const float* qr = &q[size_t((i * hq + h) * d)];
      double mx = -INFINITY;
      for (int64_t j = first; j <= pos; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < d; ++e) dot += double(qr[e]) * k[size_t((j * hkv + kh) * d + e)];
        w[size_t(j)] = dot * scale;
        mx = std::max(mx, w[size_t(j)]);
      }
      double sum = 0.0;
      for (int64_t j = first; j <= pos; ++j) sum += (w[size_t(j)] = std::exp(w[size_t(j)] - mx));
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0.0;
        for (int64_t j = first; j <= pos; ++j)
          acc += w[size_t(j)] * v[size_t((j * hkv + kh) * d + e)];
        out[size_t((i * hq + h) * d + e)] = float(acc / sum);
      }
    }
  }
  return out;
}

int32_t sample(const Vec& logits, float temperature, int32_t top_k, float top_p, uint64_t seed,
               int64_t offset) {
  SamplingCase c;
  c.temperature = temperature;
  c.top_k = top_k;
  c.top_p = top_p;
  c.seed = seed;
  c.offset = offset;
  return sample(logits, c);
}

}  // namespace nanovllm::ref
