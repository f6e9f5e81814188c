// Quantized weights (layout: quant_linear.h). Every kernel reads a weight in units of 8 k: the
// unit's codes (int8: 8 bytes, int4: 4 bytes) and the one scale (and zero) of the group holding
// it, dequantized to f32 in registers exactly as QuantizedWeight::dequantize does.
//   - GEMV (M <= 16, decode): gemv.cu's scheme, one warp per output feature: lane l takes the
//     units l, l + 32, ... (kGemvUnroll loads in flight; a warp's loads are contiguous), multiplies
//     the 8 weights with the same 8 x of every row, f32 sums, warp_sum. A row's result never
//     depends on M (same lanes, same order).
//   - dequantize: bf16 rows [row0, row0 + rows) into a scratch for cuBLASLt (prefill).
//   - embedding: one CTA per token, its row dequantized and rounded to bf16.
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/quant_linear.h"
#include "backend/cuda/quant_unpack.cuh"

namespace nanovllm::cuda {

namespace {

template <int MT, bool kF32Out, bool kInt4>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_gemv_kernel(void* out, int64_t out_stride, const uint16_t* __restrict__ x,
                      int64_t x_stride, QuantWeightView w, const uint16_t* __restrict__ bias,
                      int m) {
  const int64_t col = int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (col >= w.n) return;
  float acc[MT];
#pragma unroll
  for (int r = 0; r < MT; ++r) acc[r] = 0.0f;
  const auto x_row = [&](int r) { return x + r * x_stride; };
  quant_lane_dots<MT, kInt4>(acc, w, col, x_row, m, lane);
  gemv_store_rows<MT, kF32Out>(out, out_stride, acc, bias, col, m, lane);
}

// A thread per (row, unit), grid-stride: out[r] = bf16(w[row0 + r]), rows of k (row stride k).
template <bool kInt4>
__global__ void quant_dequantize_kernel(uint16_t* out, QuantWeightView w, int64_t row0,
                                        int64_t rows) {
  const int64_t units = (w.k + 7) / 8, total = rows * units;
  const bool vec = w.k % 8 == 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / units, u = i % units;
    float f[8];
    quant_unpack_unit<kInt4>(w, row0 + r, u, quant_load_unit<kInt4>(w, row0 + r, u), f);
    uint16_t* o = out + r * w.k + u * 8;
    if (vec) {
      store8(o, f);
    } else {
      for (int e = 0; e < 8 && u * 8 + e < w.k; ++e) o[e] = f32_to_bf16_bits(f[e]);
    }
  }
}

// One CTA per token: out[t] = bf16(w[ids[t] - vocab_start]), or `absent` in every element for an
// id outside the table's rows.
template <bool kInt4>
__global__ void quant_embedding_kernel(uint16_t* out, int64_t out_stride, const int32_t* ids,
                                       QuantWeightView w, int64_t vocab_start, uint16_t absent) {
  const int64_t t = blockIdx.x;
  const int64_t row = vocab_slice_row(ids[t], vocab_start, w.n);
  uint16_t* o = out + t * out_stride;
  if (row < 0) {
    for (int64_t i = threadIdx.x; i < w.k; i += blockDim.x) o[i] = absent;
    return;
  }
  const int64_t units = (w.k + 7) / 8;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float f[8];
    quant_unpack_unit<kInt4>(w, row, u, quant_load_unit<kInt4>(w, row, u), f);
    for (int e = 0; e < 8 && u * 8 + e < w.k; ++e) o[u * 8 + e] = f32_to_bf16_bits(f[e]);
  }
}

template <int MT, bool kInt4>
void launch_gemv_mt(void* out, bool out_f32, int64_t out_stride, const uint16_t* x,
                    int64_t x_stride, const QuantWeightView& w, const uint16_t* bias, int64_t m,
                    cudaStream_t stream) {
  const unsigned grid = unsigned((w.n + kGemvWarps - 1) / kGemvWarps);
  if (out_f32) {
    quant_gemv_kernel<MT, true, kInt4>
        <<<grid, kGemvWarps * 32, 0, stream>>>(out, out_stride, x, x_stride, w, bias, int(m));
  } else {
    quant_gemv_kernel<MT, false, kInt4>
        <<<grid, kGemvWarps * 32, 0, stream>>>(out, out_stride, x, x_stride, w, bias, int(m));
  }
}

template <bool kInt4>
void launch_gemv_format(void* out, bool out_f32, int64_t out_stride, const uint16_t* x,
                        int64_t x_stride, const QuantWeightView& w, const uint16_t* bias,
                        int64_t m, cudaStream_t stream) {
  switch (gemv_m_tile(m)) {
    case 1:
      launch_gemv_mt<1, kInt4>(out, out_f32, out_stride, x, x_stride, w, bias, m, stream);
      break;
    case 2:
      launch_gemv_mt<2, kInt4>(out, out_f32, out_stride, x, x_stride, w, bias, m, stream);
      break;
    case 4:
      launch_gemv_mt<4, kInt4>(out, out_f32, out_stride, x, x_stride, w, bias, m, stream);
      break;
    case 8:
      launch_gemv_mt<8, kInt4>(out, out_f32, out_stride, x, x_stride, w, bias, m, stream);
      break;
    default:
      launch_gemv_mt<16, kInt4>(out, out_f32, out_stride, x, x_stride, w, bias, m, stream);
      break;
  }
}

}  // namespace

void launch_quant_gemv(void* out, bool out_f32, int64_t out_stride, const uint16_t* x,
                       int64_t x_stride, const QuantWeightView& w, const uint16_t* bias, int64_t m,
                       cudaStream_t stream) {
  if (m == 0 || w.n == 0) return;
  if (w.int4) {
    launch_gemv_format<true>(out, out_f32, out_stride, x, x_stride, w, bias, m, stream);
  } else {
    launch_gemv_format<false>(out, out_f32, out_stride, x, x_stride, w, bias, m, stream);
  }
  NV_CUDA_CHECK("linear (quantized gemv)", cudaGetLastError());
}

void launch_quant_dequantize(uint16_t* out, const QuantWeightView& w, int64_t row0, int64_t rows,
                             cudaStream_t stream) {
  if (rows == 0 || w.k == 0) return;
  const int64_t total = rows * ((w.k + 7) / 8);
  const unsigned grid = unsigned(blocks_for(total, 256));
  if (w.int4) {
    quant_dequantize_kernel<true><<<grid, 256, 0, stream>>>(out, w, row0, rows);
  } else {
    quant_dequantize_kernel<false><<<grid, 256, 0, stream>>>(out, w, row0, rows);
  }
  NV_CUDA_CHECK("linear (dequantize)", cudaGetLastError());
}

void launch_quant_embedding(uint16_t* out, int64_t out_stride, const int32_t* ids, int64_t tokens,
                            const QuantWeightView& w, int64_t vocab_start, bool zero_absent,
                            cudaStream_t stream) {
  if (tokens == 0) return;
  const uint16_t absent = zero_absent ? 0 : 0x7fc0;
  if (w.int4) {
    quant_embedding_kernel<true>
        <<<unsigned(tokens), 128, 0, stream>>>(out, out_stride, ids, w, vocab_start, absent);
  } else {
    quant_embedding_kernel<false>
        <<<unsigned(tokens), 128, 0, stream>>>(out, out_stride, ids, w, vocab_start, absent);
  }
  NV_CUDA_CHECK("embedding (quantized)", cudaGetLastError());
}

}  // namespace nanovllm::cuda
