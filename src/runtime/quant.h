#pragma once
// Quantized linear weights on the host: the formats, the one unpacked form every loader produces
// (round to nearest from bf16 at load; a checkpoint's own AWQ / GPTQ / FP8 codes) and every
// backend repacks from into its own layout (Backend::make_quantized_linear_weight).
//
//   int8, group 0:  w[j][i] = q[j][i] * scale[j]                 one scale per output row
//   int8, group G:  w[j][i] = q[j][i] * scale[j][i / G]           (GPTQ 8-bit, FP8 requantized)
//                   q in [-128, 127]; scale any f32
//   int4, group G:  w[j][i] = (q[j][i] - zero[j][g]) * scale[j][g], g = i / G, q in [0, 15];
//                   scale and zero are f16 values (AWQ / GPTQ: zero an integer; round to
//                   nearest: min / max of the group on the grid, zero fractional)
#include <cstdint>
#include <string>
#include <vector>

namespace nanovllm {

enum class QuantFormat : uint8_t { None, Int8, Int4 };

struct QuantScheme {
  QuantFormat format = QuantFormat::None;
  int64_t group = 0;  // k values per scale, a multiple of 8 (int4: > 0; int8: 0 = per row)
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
  std::vector<float> zero;     // [n, groups()] (int4); empty for int8
  int64_t groups() const;      // group 0: 1; else ceil(k / group)
  int64_t group_size() const;  // group 0: k; else group
  float dequantize(int64_t j, int64_t i) const;
  // A [n, k] weight of the scheme with every code, scale and zero 0, for a loader to fill in.
  static QuantizedWeight sized(QuantScheme scheme, int64_t n, int64_t k);
};

// Error naming `what` when w breaks the form above: sizes, code ranges, int4 scale / zero not
// f16 values, non-finite scales. Loaders of quantized checkpoints call it before packing.
void validate(const QuantizedWeight& w, const std::string& what);
// Rows of several weights of the same k and scheme stacked (q/k/v, gate/up).
QuantizedWeight stack_rows(const std::vector<QuantizedWeight>& parts);
// Rows [r0, r1) (tensor-parallel row shards of a checkpoint's quantized weight).
QuantizedWeight slice_rows(const QuantizedWeight& w, int64_t r0, int64_t r1);

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
