#include "runtime/tensor.h"

#include <cstring>

#include <fmt/format.h>

namespace nanovllm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F8E4M3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F8E4M3: return "fp8_e4m3";
  }
  return "?";
}

Tensor Tensor::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                          DeviceKind device) {
  NV_CHECK(shape.size() >= 1 && shape.size() <= size_t(kMaxDims));
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = int(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t st = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = st;
    st *= t.shape[d];
  }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t st = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != st) return false;
    st *= shape[d];
  }
  return true;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  NV_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "{} rows [{}, {})",
           describe(), begin, end);
  Tensor t = *this;
  t.data = static_cast<char*>(data) + begin * stride[0] * int64_t(dtype_size(dtype));
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::slice_last(int64_t begin, int64_t end) const {
  int d = ndim - 1;
  NV_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[d], "{} cols [{}, {})",
           describe(), begin, end);
  Tensor t = *this;
  t.data = static_cast<char*>(data) + begin * stride[d] * int64_t(dtype_size(dtype));
  t.shape[d] = end - begin;
  return t;
}

Tensor Tensor::view(std::initializer_list<int64_t> new_shape) const {
  NV_CHECK(is_contiguous(), "view of non-contiguous {}", describe());
  Tensor t = contiguous(data, dtype, new_shape, device);
  NV_CHECK(t.numel() == numel(), "view {} as {}", describe(), t.describe());
  return t;
}

Tensor Tensor::unflatten_last(int64_t n) const {
  int d = ndim - 1;
  NV_CHECK(ndim < kMaxDims && n > 0 && shape[d] % n == 0 && stride[d] == 1, "unflatten {} by {}",
           describe(), n);
  Tensor t = *this;
  t.ndim = ndim + 1;
  t.shape[d] = n;
  t.shape[d + 1] = shape[d] / n;
  t.stride[d] = shape[d] / n;
  t.stride[d + 1] = 1;
  return t;
}

std::string Tensor::describe() const {
  std::string s = fmt::format("{}[", dtype_name(dtype));
  for (int d = 0; d < ndim; ++d) s += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return s + "]";
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    deleter_ = std::move(o.deleter_);
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.deleter_ = nullptr;
  }
  return *this;
}

void Buffer::reset() {
  if (data_ && deleter_) deleter_(data_);
  data_ = nullptr;
  bytes_ = 0;
  deleter_ = nullptr;
}

Tensor Buffer::as(DType dtype, std::initializer_list<int64_t> shape) const {
  Tensor t = Tensor::contiguous(data_, dtype, shape, device_);
  NV_CHECK(t.nbytes() <= bytes_, "{} does not fit in {} bytes", t.describe(), bytes_);
  return t;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = int32_t((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t h = sign | uint32_t(exp) << 10 | mant >> 13;
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(h);
}

}  // namespace nanovllm
