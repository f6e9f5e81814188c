// Row copies: embedding lookup (whole table or a vocab-parallel slice), gather_rows, and the
// bias add after cuBLASLt (f32 output).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"

namespace nanovllm::cuda {

namespace {

// One CTA per token: out[t] = table[ids[t] - vocab_start] for an id in [vocab_start,
// vocab_start + rows); any other id fills its row with `absent`: a NaN (0x7fc0) for the whole
// table (the engine rejects such ids before they reach the device), zeros for one rank's slice
// of a vocab-parallel table (F.embedding masked as VocabParallelEmbedding).
__global__ void embedding_kernel(uint16_t* out, int64_t out_stride, const int32_t* ids,
                                 const uint16_t* table, int64_t vocab_start, int64_t rows,
                                 int64_t hidden, uint16_t absent) {
  const int64_t t = blockIdx.x;
  const int64_t row = vocab_slice_row(ids[t], vocab_start, rows);
  uint16_t* o = out + t * out_stride;
  if (row < 0) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = absent;
    return;
  }
  copy_row_u16(o, table + row * hidden, hidden);
}

// One CTA per output row: out[b] = x[idx[b]] (an index outside x gives zeros).
__global__ void gather_rows_kernel(char* out, int64_t out_stride, const char* x, int64_t x_stride,
                                   int64_t x_rows, const int32_t* idx, int64_t row_u16) {
  const int64_t b = blockIdx.x;
  uint16_t* o = reinterpret_cast<uint16_t*>(out + b * out_stride);
  const int32_t r = idx[b];
  if (r < 0 || r >= x_rows) {
    for (int64_t i = threadIdx.x; i < row_u16; i += blockDim.x) o[i] = 0;
    return;
  }
  copy_row_u16(o, reinterpret_cast<const uint16_t*>(x + int64_t(r) * x_stride), row_u16);
}

__global__ void add_bias_kernel(void* out, bool out_f32, int64_t out_stride, const uint16_t* bias,
                                int64_t rows, int64_t n) {
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    if (out_f32) {
      static_cast<float*>(out)[r * out_stride + c] += ld_bf16(bias + c);
    } else {
      uint16_t* p = static_cast<uint16_t*>(out) + r * out_stride + c;
      st_bf16(p, ld_bf16(p) + ld_bf16(bias + c));
    }
  }
}

}  // namespace

void launch_embedding(uint16_t* out, int64_t out_stride, const int32_t* ids, int64_t tokens,
                      const uint16_t* table, int64_t vocab, int64_t hidden, cudaStream_t stream) {
  if (tokens == 0) return;
  embedding_kernel<<<unsigned(tokens), 128, 0, stream>>>(out, out_stride, ids, table, 0, vocab,
                                                         hidden, 0x7fc0);
  NV_CUDA_CHECK("embedding", cudaGetLastError());
}

void launch_vocab_parallel_embedding(uint16_t* out, int64_t out_stride, const int32_t* ids,
                                     int64_t tokens, const uint16_t* table, int64_t vocab_start,
                                     int64_t rows, int64_t hidden, cudaStream_t stream) {
  if (tokens == 0) return;
  embedding_kernel<<<unsigned(tokens), 128, 0, stream>>>(out, out_stride, ids, table, vocab_start,
                                                         rows, hidden, 0);
  NV_CUDA_CHECK("vocab_parallel_embedding", cudaGetLastError());
}

void launch_gather_rows(void* out, int64_t out_stride_bytes, const void* x, int64_t x_stride_bytes,
                        int64_t x_rows, const int32_t* idx, int64_t n, int64_t row_bytes,
                        cudaStream_t stream) {
  if (n == 0) return;
  gather_rows_kernel<<<unsigned(n), 128, 0, stream>>>(static_cast<char*>(out), out_stride_bytes,
                                                      static_cast<const char*>(x), x_stride_bytes,
                                                      x_rows, idx, row_bytes / 2);
  NV_CUDA_CHECK("gather_rows", cudaGetLastError());
}

void launch_add_bias(void* out, bool out_f32, int64_t out_stride, const uint16_t* bias,
                     int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows * n == 0) return;
  add_bias_kernel<<<unsigned(blocks_for(rows * n, 256)), 256, 0, stream>>>(out, out_f32, out_stride,
                                                                           bias, rows, n);
  NV_CUDA_CHECK("linear (bias)", cudaGetLastError());
}

}  // namespace nanovllm::cuda
