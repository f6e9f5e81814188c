#pragma once
// Quantized linear weights on the GPU (runtime/quant.h's formats): the device layout
// CudaBackend::make_quantized_linear_weight repacks into once at load, and the launchers of
// quant_linear.cu (W8A16 / W4A16 GEMV for small M, dequantization to bf16 for cuBLASLt, and the
// embedding lookup of a quantized table). Plain C++ (host and device).
//
// Layout of a [n, k] weight, one allocation: codes, then (256-byte aligned) scales.
//   codes: row j at j * row_bytes; k8 = k rounded up to 8; int8: one byte per k (row_bytes = k8);
//          int4: two codes a byte along k, k = 2b in the low nibble of byte b and 2b + 1 in the
//          high one (row_bytes = k8 / 2), so the 8 codes of k unit u (k 8u..8u+7) are the 4
//          bytes at 4u, nibble e of that little-endian u32 being k 8u + e. Padding past k: 0.
//   scales: one u32 per (row, group), [n, groups] row-major: int8 the f32 scale's bits; int4 the
//          f16 bits of the scale (low half) and of the zero (high half), exact since both are f16
//          values. A unit of 8 k never straddles groups (groups are multiples of 8).
//   w[j][i] = q * scale (int8) or (q - zero) * scale (int4), each step rounded in f32, as
//   QuantizedWeight::dequantize.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/device_math.h"

namespace nanovllm::cuda {

struct QuantDeviceLayout {
  bool int4 = false;
  int64_t n = 0, k = 0;
  int64_t k8 = 0;         // k rounded up to 8
  int64_t row_bytes = 0;  // bytes of codes per row
  int64_t groups = 0;     // scales per row
  int64_t group = 0;      // k per scale (per-row int8: k8)
  size_t codes_bytes = 0;    // n * row_bytes, rounded up to 256
  size_t scales_offset = 0;  // = codes_bytes
  size_t bytes = 0;          // codes and scales
};

// int4: group > 0; group a multiple of 8 (int8: 0 = one scale per row).
inline QuantDeviceLayout quant_device_layout(bool int4, int64_t group, int64_t n, int64_t k) {
  QuantDeviceLayout l;
  l.int4 = int4;
  l.n = n;
  l.k = k;
  l.k8 = (k + 7) / 8 * 8;
  l.row_bytes = int4 ? l.k8 / 2 : l.k8;
  l.groups = group ? (k + group - 1) / group : 1;
  l.group = group ? group : l.k8;
  l.codes_bytes = (size_t(n * l.row_bytes) + 255) / 256 * 256;
  l.scales_offset = l.codes_bytes;
  l.bytes = l.codes_bytes + size_t(n * l.groups) * 4;
  return l;
}

// What the kernels read of a quantized weight on the device.
struct QuantWeightView {
  const uint8_t* codes = nullptr;
  const uint32_t* scales = nullptr;
  int64_t n = 0, k = 0;
  int64_t row_bytes = 0;
  int32_t groups = 0;
  int32_t group = 0;
  bool int4 = false;
};

// Bytes of the bf16 scratch linear() dequantizes a weight into for cuBLASLt (M > kGemvMaxM, or
// x / k unfit for the GEMV): at most this much at a time, in chunks of output rows.
inline constexpr int64_t kQuantDequantBytes = int64_t(64) << 20;
// Rows of one dequantized chunk of a [n, k] weight: a multiple of 8 (at least 8), at most n.
inline int64_t quant_dequant_chunk_rows(int64_t n, int64_t k) {
  int64_t rows = kQuantDequantBytes / (2 * (k < 1 ? 1 : k)) / 8 * 8;
  if (rows < 8) rows = 8;
  return rows < n ? rows : n;
}

// out[m, n] = x[m, k] @ w^T (+ bias), w dequantized in registers, f32 sums; x bf16 rows of
// stride x_stride (16-byte aligned, x_stride % 8 == 0), k % 8 == 0, 1 <= m <= kGemvMaxM; out
// bf16 or f32. Row r's result does not depend on m.
void launch_quant_gemv(void* out, bool out_f32, int64_t out_stride, const uint16_t* x,
                       int64_t x_stride, const QuantWeightView& w, const uint16_t* bias, int64_t m,
                       cudaStream_t stream);
// out[r, i] = bf16(w[row0 + r][i]) for r < rows, i < k (out row-major, row stride k).
void launch_quant_dequantize(uint16_t* out, const QuantWeightView& w, int64_t row0, int64_t rows,
                             cudaStream_t stream);
// The embedding lookup of a quantized table holding vocab rows [vocab_start, vocab_start + w.n):
// out[t] = bf16(w[ids[t] - vocab_start]) for an id in range; any other id gives a zero row when
// zero_absent (a vocab-parallel slice), else a NaN row (the whole table).
void launch_quant_embedding(uint16_t* out, int64_t out_stride, const int32_t* ids, int64_t tokens,
                            const QuantWeightView& w, int64_t vocab_start, bool zero_absent,
                            cudaStream_t stream);

}  // namespace nanovllm::cuda
