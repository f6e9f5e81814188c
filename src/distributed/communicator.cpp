#include "distributed/communicator.h"

#include <algorithm>

namespace nanovllm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

namespace comm_detail {

void check_tensor(const char* primitive, const char* what, const Tensor& t, DeviceKind device) {
  if (t.numel() > 0 && t.data == nullptr) fail("{}: {} has no data", primitive, what);
  if (!t.is_contiguous()) fail("{}: {} {} is not contiguous", primitive, what, t.describe());
  if (t.device != device) {
    fail("{}: {} {} is on the {} but this communicator works on the {}", primitive, what,
         t.describe(), t.device == DeviceKind::CPU ? "CPU" : "GPU",
         device == DeviceKind::CPU ? "CPU" : "GPU");
  }
}

void check_reducible(const char* primitive, DType dtype) {
  switch (dtype) {
    case DType::F32: case DType::BF16: case DType::I32: case DType::I64: return;
    default: break;
  }
  fail("{}: cannot reduce dtype {} (supported: f32, bf16, i32, i64)", primitive, dtype_name(dtype));
}

void check_counts(const char* primitive, const std::vector<int64_t>& counts, int world_size) {
  if (int(counts.size()) != world_size) {
    fail("{}: {} counts given for a world of {} ranks", primitive, counts.size(), world_size);
  }
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) fail("{}: count of rank {} is negative ({})", primitive, r, counts[r]);
  }
}

void check_root(const char* primitive, int root, int world_size) {
  if (root < 0 || root >= world_size) {
    fail("{}: root {} outside the world [0, {})", primitive, root, world_size);
  }
}

void check_numel(const char* primitive, const char* what, const Tensor& t, int64_t numel) {
  if (t.numel() != numel) {
    fail("{}: {} {} has {} elements, expected {}", primitive, what, t.describe(), t.numel(), numel);
  }
}

std::vector<int64_t> offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

std::vector<int64_t> even_counts(const char* primitive, int64_t numel, int world_size) {
  if (numel % world_size != 0) {
    fail("{}: {} elements do not split evenly over {} ranks (pass counts for uneven chunks)",
         primitive, numel, world_size);
  }
  return std::vector<int64_t>(size_t(world_size), numel / world_size);
}

namespace {
template <typename T>
void reduce_typed(T* dst, const T* src, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: for (int64_t i = 0; i < n; ++i) dst[i] += src[i]; return;
    case ReduceOp::Min: for (int64_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]); return;
    case ReduceOp::Max: for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]); return;
  }
}

void reduce_bf16(uint16_t* dst, const uint16_t* src, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    float a = bf16_to_f32(dst[i]), b = bf16_to_f32(src[i]);
    float r = op == ReduceOp::Sum ? a + b : op == ReduceOp::Min ? std::min(a, b) : std::max(a, b);
    dst[i] = f32_to_bf16(r);
  }
}
}  // namespace

void reduce_into(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::F32: return reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DType::I32: return reduce_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case DType::I64: return reduce_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    case DType::BF16:
      return reduce_bf16(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
    default: break;
  }
  fail("reduce: dtype {} is not reducible", dtype_name(dtype));
}

}  // namespace comm_detail

void Communicator::scatter(Tensor send, Tensor recv, int root) {
  scatter(send, recv, root, comm_detail::even_counts("scatter", recv.numel() * world_size(), world_size()));
}
void Communicator::gather(Tensor send, Tensor recv, int root) {
  gather(send, recv, root, comm_detail::even_counts("gather", send.numel() * world_size(), world_size()));
}
void Communicator::all_gather(Tensor send, Tensor recv) {
  all_gather(send, recv, comm_detail::even_counts("all_gather", recv.numel(), world_size()));
}
void Communicator::reduce_scatter(Tensor send, Tensor recv, ReduceOp op) {
  reduce_scatter(send, recv, comm_detail::even_counts("reduce_scatter", send.numel(), world_size()), op);
}
void Communicator::all_to_all(Tensor send, Tensor recv) {
  auto counts = comm_detail::even_counts("all_to_all", send.numel(), world_size());
  all_to_all(send, recv, counts, comm_detail::even_counts("all_to_all", recv.numel(), world_size()));
}

}  // namespace nanovllm
