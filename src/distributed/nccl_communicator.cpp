#include "distributed/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

namespace nanovllm {

using namespace comm_detail;

namespace {

void cuda_call(const char* what, cudaError_t rc) {
  if (rc != cudaSuccess) fail("nccl communicator: {} failed: {}", what, cudaGetErrorString(rc));
}

void nccl_call(const char* what, ncclResult_t rc) {
  if (rc != ncclSuccess) fail("nccl communicator: {} failed: {}", what, ncclGetErrorString(rc));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: break;  // data movement only (reductions are checked before): same-size integers
  }
  switch (dtype_size(t)) {
    case 2: return ncclFloat16;
    case 4: return ncclInt32;
    case 8: return ncclInt64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

char* at(void* p, int64_t elem, DType t) { return static_cast<char*>(p) + elem * int64_t(dtype_size(t)); }

bool all_equal(const std::vector<int64_t>& counts) {
  for (int64_t c : counts) {
    if (c != counts[0]) return false;
  }
  return true;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator* bootstrap, int device, cudaStream_t stream)
      : bootstrap_(bootstrap), owns_stream_(stream == nullptr) {
    rank_ = bootstrap ? bootstrap->rank() : 0;
    world_size_ = bootstrap ? bootstrap->world_size() : 1;
    if (bootstrap) timeout_seconds_ = bootstrap->timeout_seconds();
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) nccl_call("ncclGetUniqueId", ncclGetUniqueId(&id));
    if (bootstrap) {
      // The id travels as 32 i32 words over the bootstrap communicator.
      static_assert(sizeof(ncclUniqueId) % 4 == 0);
      bootstrap->broadcast(Tensor::contiguous(&id, DType::I32, {int64_t(sizeof(id) / 4)}), 0);
    }
    cuda_call("cudaSetDevice", cudaSetDevice(device));
    if (owns_stream_) {
      cuda_call("cudaStreamCreate", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    } else {
      stream_ = stream;
    }
    cuda_call("cudaMalloc", cudaMalloc(&scratch_, sizeof(int32_t)));
    nccl_call("ncclCommInitRank", ncclCommInitRank(&comm_, world_size_, id, rank_));
  }

  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    if (scratch_) cudaFree(scratch_);
    if (stream_ && owns_stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend_name() const override { return "nccl"; }
  std::string algorithm(const char* primitive) const override {
    std::string p = primitive;
    if (p == "scatter" || p == "gather" || p == "all_to_all") return "NCCL grouped send/recv";
    if (p == "barrier") return "NCCL all-reduce of 1 int + stream sync";
    return "NCCL (ring/tree chosen by NCCL)";
  }
  void* stream() const override { return stream_; }

  void synchronize() override {
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(timeout_seconds_));
    for (;;) {
      cudaError_t rc = cudaStreamQuery(stream_);
      if (rc == cudaSuccess) return;
      if (rc != cudaErrorNotReady) cuda_call("cudaStreamQuery", rc);
      ncclResult_t async = ncclSuccess;
      nccl_call("ncclCommGetAsyncError", ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        fail("nccl communicator rank {}: asynchronous error {}", rank_, ncclGetErrorString(async));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        fail("nccl communicator rank {}: the stream waited {:.1f} s for its peers", rank_, timeout_seconds_);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void broadcast(Tensor x, int root) override {
    check_root("broadcast", root, world_size_);
    check_tensor("broadcast", "x", x, DeviceKind::CUDA);
    nccl_call("ncclBroadcast", ncclBroadcast(x.data, x.data, size_t(x.numel()), nccl_type(x.dtype),
                                             root, comm_, stream_));
  }

  void scatter(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) override {
    check_root("scatter", root, world_size_);
    check_counts("scatter", counts, world_size_);
    check_tensor("scatter", "recv", recv, DeviceKind::CUDA);
    check_numel("scatter", "recv", recv, counts[size_t(rank_)]);
    auto off = offsets(counts);
    if (rank_ == root) {
      check_tensor("scatter", "send", send, DeviceKind::CUDA);
      check_numel("scatter", "send", send, off.back());
    }
    group([&] {
      if (rank_ == root) {
        for (int r = 0; r < world_size_; ++r) {
          if (r == root) continue;
          nccl_call("ncclSend", ncclSend(at(send.data, off[size_t(r)], send.dtype), size_t(counts[size_t(r)]),
                                         nccl_type(send.dtype), r, comm_, stream_));
        }
      } else {
        nccl_call("ncclRecv", ncclRecv(recv.data, size_t(recv.numel()), nccl_type(recv.dtype), root, comm_, stream_));
      }
    });
    if (rank_ == root && recv.nbytes() > 0) {
      cuda_call("cudaMemcpyAsync", cudaMemcpyAsync(recv.data, at(send.data, off[size_t(root)], send.dtype),
                                                   recv.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    }
  }

  void gather(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) override {
    check_root("gather", root, world_size_);
    check_counts("gather", counts, world_size_);
    check_tensor("gather", "send", send, DeviceKind::CUDA);
    check_numel("gather", "send", send, counts[size_t(rank_)]);
    auto off = offsets(counts);
    if (rank_ == root) {
      check_tensor("gather", "recv", recv, DeviceKind::CUDA);
      check_numel("gather", "recv", recv, off.back());
    }
    group([&] {
      if (rank_ == root) {
        for (int r = 0; r < world_size_; ++r) {
          if (r == root) continue;
          nccl_call("ncclRecv", ncclRecv(at(recv.data, off[size_t(r)], recv.dtype), size_t(counts[size_t(r)]),
                                         nccl_type(recv.dtype), r, comm_, stream_));
        }
      } else {
        nccl_call("ncclSend", ncclSend(send.data, size_t(send.numel()), nccl_type(send.dtype), root, comm_, stream_));
      }
    });
    if (rank_ == root && send.nbytes() > 0) {
      cuda_call("cudaMemcpyAsync", cudaMemcpyAsync(at(recv.data, off[size_t(root)], recv.dtype), send.data,
                                                   send.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    }
  }

  void reduce(Tensor send, Tensor recv, int root, ReduceOp op) override {
    check_root("reduce", root, world_size_);
    check_reducible("reduce", send.dtype);
    check_tensor("reduce", "send", send, DeviceKind::CUDA);
    if (rank_ == root) check_numel("reduce", "recv", recv, send.numel());
    nccl_call("ncclReduce", ncclReduce(send.data, rank_ == root ? recv.data : send.data, size_t(send.numel()),
                                       nccl_type(send.dtype), nccl_op(op), root, comm_, stream_));
  }

  void all_gather(Tensor send, Tensor recv, const std::vector<int64_t>& counts) override {
    check_counts("all_gather", counts, world_size_);
    check_tensor("all_gather", "send", send, DeviceKind::CUDA);
    check_tensor("all_gather", "recv", recv, DeviceKind::CUDA);
    check_numel("all_gather", "send", send, counts[size_t(rank_)]);
    auto off = offsets(counts);
    check_numel("all_gather", "recv", recv, off.back());
    if (all_equal(counts)) {
      nccl_call("ncclAllGather", ncclAllGather(send.data, recv.data, size_t(counts[0]), nccl_type(send.dtype),
                                               comm_, stream_));
      return;
    }
    group([&] {
      for (int r = 0; r < world_size_; ++r) {
        nccl_call("ncclBroadcast", ncclBroadcast(send.data, at(recv.data, off[size_t(r)], recv.dtype),
                                                 size_t(counts[size_t(r)]), nccl_type(recv.dtype), r, comm_, stream_));
      }
    });
  }

  void reduce_scatter(Tensor send, Tensor recv, const std::vector<int64_t>& counts, ReduceOp op) override {
    check_counts("reduce_scatter", counts, world_size_);
    check_reducible("reduce_scatter", send.dtype);
    check_tensor("reduce_scatter", "send", send, DeviceKind::CUDA);
    check_tensor("reduce_scatter", "recv", recv, DeviceKind::CUDA);
    auto off = offsets(counts);
    check_numel("reduce_scatter", "send", send, off.back());
    check_numel("reduce_scatter", "recv", recv, counts[size_t(rank_)]);
    if (all_equal(counts)) {
      nccl_call("ncclReduceScatter", ncclReduceScatter(send.data, recv.data, size_t(counts[0]),
                                                       nccl_type(send.dtype), nccl_op(op), comm_, stream_));
      return;
    }
    group([&] {
      for (int r = 0; r < world_size_; ++r) {
        nccl_call("ncclReduce", ncclReduce(at(send.data, off[size_t(r)], send.dtype), recv.data,
                                           size_t(counts[size_t(r)]), nccl_type(send.dtype), nccl_op(op), r,
                                           comm_, stream_));
      }
    });
  }

  void all_reduce(Tensor x, ReduceOp op) override {
    check_reducible("all_reduce", x.dtype);
    check_tensor("all_reduce", "x", x, DeviceKind::CUDA);
    nccl_call("ncclAllReduce", ncclAllReduce(x.data, x.data, size_t(x.numel()), nccl_type(x.dtype),
                                             nccl_op(op), comm_, stream_));
  }

  void all_to_all(Tensor send, Tensor recv, const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    check_counts("all_to_all", send_counts, world_size_);
    check_counts("all_to_all", recv_counts, world_size_);
    check_tensor("all_to_all", "send", send, DeviceKind::CUDA);
    check_tensor("all_to_all", "recv", recv, DeviceKind::CUDA);
    auto soff = offsets(send_counts), roff = offsets(recv_counts);
    check_numel("all_to_all", "send", send, soff.back());
    check_numel("all_to_all", "recv", recv, roff.back());
    group([&] {
      for (int r = 0; r < world_size_; ++r) {
        nccl_call("ncclSend", ncclSend(at(send.data, soff[size_t(r)], send.dtype), size_t(send_counts[size_t(r)]),
                                       nccl_type(send.dtype), r, comm_, stream_));
        nccl_call("ncclRecv", ncclRecv(at(recv.data, roff[size_t(r)], recv.dtype), size_t(recv_counts[size_t(r)]),
                                       nccl_type(recv.dtype), r, comm_, stream_));
      }
    });
  }

  // NCCL has no tags: messages between one pair arrive in the order they were sent.
  void send(Tensor x, int peer, int) override {
    check_root("send", peer, world_size_);
    check_tensor("send", "x", x, DeviceKind::CUDA);
    nccl_call("ncclSend", ncclSend(x.data, size_t(x.numel()), nccl_type(x.dtype), peer, comm_, stream_));
  }

  void recv(Tensor x, int peer, int) override {
    check_root("recv", peer, world_size_);
    check_tensor("recv", "x", x, DeviceKind::CUDA);
    nccl_call("ncclRecv", ncclRecv(x.data, size_t(x.numel()), nccl_type(x.dtype), peer, comm_, stream_));
  }

  void barrier() override {
    nccl_call("ncclAllReduce", ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_));
    synchronize();
  }

  void abort(const std::string& reason) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    if (bootstrap_) bootstrap_->abort(reason);
    fail("nccl communicator rank {} aborted: {}", rank_, reason);
  }

 private:
  template <typename F>
  void group(F&& body) {
    nccl_call("ncclGroupStart", ncclGroupStart());
    try {
      body();
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    nccl_call("ncclGroupEnd", ncclGroupEnd());
  }

  Communicator* bootstrap_;
  bool owns_stream_;
  int rank_ = 0;
  int world_size_ = 1;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator* bootstrap, int cuda_device,
                                                     void* stream) {
  return std::make_unique<NcclCommunicator>(bootstrap, cuda_device, static_cast<cudaStream_t>(stream));
}

}  // namespace nanovllm
