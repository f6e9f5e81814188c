#pragma once
// Tensor: a non-owning view (data, dtype, shape, strides, device). Buffer: owned device memory.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "util/check.h"

namespace nanovllm {

// F8E4M3: 1-byte OCP E4M3 codes (runtime/fp8.h), the element of the fp8 KV cache.
enum class DType : uint8_t { BF16, F16, F32, I32, I64, F8E4M3 };
enum class DeviceKind : uint8_t { CPU, CUDA };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

// A strided view of up to 4 dimensions. Strides are in elements. Most ops require the last
// dimension to be contiguous (stride 1); each op says what else it needs.
struct Tensor {
  static constexpr int kMaxDims = 4;
  void* data = nullptr;
  DType dtype = DType::F32;
  DeviceKind device = DeviceKind::CPU;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};

  // A contiguous row-major view.
  static Tensor contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           DeviceKind device = DeviceKind::CPU);

  int64_t size(int dim) const { return shape[dim < 0 ? ndim + dim : dim]; }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // Rows [begin, end) of dimension 0 (same strides).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Columns [begin, end) of the last dimension (same strides: not contiguous in general).
  Tensor slice_last(int64_t begin, int64_t end) const;
  // Reinterpret a contiguous tensor with a new shape of the same numel.
  Tensor view(std::initializer_list<int64_t> shape) const;
  // Split the last dim into [n, last/n] (works on strided tensors when the last dim is contiguous).
  Tensor unflatten_last(int64_t n) const;
  std::string describe() const;  // "bf16[4, 8]"
};

// Owned memory on one device. Move-only; freed by the deleter the backend gave it.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, DeviceKind device, std::function<void(void*)> deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DeviceKind device() const { return device_; }
  Tensor as(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  DeviceKind device_ = DeviceKind::CPU;
  std::function<void(void*)> deleter_;
};

// bf16 <-> f32 on the host (round to nearest even; NaN stays NaN).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace nanovllm
