#pragma once
// Quantized linear weights on the host: the formats, the one unpacked form every loader produces
// (round to nearest from bf16 at load today; a checkpoint's own AWQ/GPTQ codes map onto it) and
// every backend repacks from into its own layout (Backend::make_quantized_linear_weight).
//
//   int8: w[j][i] = q[j][i] * scale[j]                 q in [-127, 127], one f32 scale per
//                                                      output row (per channel, symmetric)
//   int4: w[j][i] = q[j][i] * scale[j][g] + min[j][g]   g = i / group, q in [0, 15]; scale and
//                                                      min are f16 values (asymmetric groups,
//                                                      llama.cpp's Q4_1 form; AWQ's and GPTQ's
//                                                      (q - zero) * scale is min = -zero * scale)
#include <cstdint>
#include <string>
#include <vector>

namespace nanovllm {

enum class QuantFormat : uint8_t { None, Int8, Int4 };

struct QuantScheme {
  QuantFormat format = QuantFormat::None;
  int64_t group = 0;  // int4: k values per scale (32, 64 or 128); int8: 0 (per output row)
  bool enabled() const { return format != QuantFormat::None; }
};

constexpr int64_t kDefaultInt4Group = 64;

// Config::quantization: "" or "none", "int8", "int4" (group kDefaultInt4Group), "int4-g32",
// "int4-g64", "int4-g128". Anything else throws Error naming the accepted values.
QuantScheme parse_quantization(const std::string& name);
std::string quantization_name(QuantScheme s);  // "none", "int8", "int4-g64"
// Bytes per weight of a [n, k] matrix in the scheme, with its scales (bf16: 2).
double quantized_bytes_per_weight(QuantScheme s, int64_t k);

// A [n, k] weight in the unpacked host form above.
struct QuantizedWeight {
  QuantScheme scheme;
  int64_t n = 0, k = 0;
  std::vector<int8_t> q;       // [n, k]
  std::vector<float> scale;    // [n, groups()]
  std::vector<float> min;      // [n, groups()] (int4); empty for int8
  int64_t groups() const;      // int8: 1; int4: ceil(k / group)
  int64_t group_size() const;  // int8: k; int4: group
  float dequantize(int64_t j, int64_t i) const;
};

// Round-to-nearest quantization of w (bf16 bits, row-major [n, k]). `what` names the tensor in
// the Error a non-finite value throws.
QuantizedWeight quantize_rtn(const uint16_t* w, int64_t n, int64_t k, QuantScheme scheme,
                             const std::string& what);
// Columns [c0, c1) of a quantized weight (a tensor-parallel shard of o_proj / down_proj). Rows
// quantize independently, so a row shard is simply quantized after slicing; a column shard is
// cut from the whole row's quantization instead, so every rank holds exactly its columns of the
// unsharded weight. int4: c0 must start a group (an Error with the numbers otherwise); int8
// keeps the whole row's scale.
QuantizedWeight slice_cols(const QuantizedWeight& w, int64_t c0, int64_t c1, const std::string& what);

}  // namespace nanovllm
