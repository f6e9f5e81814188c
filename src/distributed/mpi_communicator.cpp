#include "distributed/mpi_communicator.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <mpi.h>

#include <fmt/format.h>

namespace nanovllm {

using namespace comm_detail;

namespace {

// inout[i] = op(in[i], inout[i]) on bf16, in fp32 (MPI_User_function).
template <ReduceOp Op>
void bf16_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, *len, DType::BF16, Op);
}

std::atomic<bool> g_mpi_live{false};  // one MPI communicator per process (MPI starts once)

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_seconds) {
    timeout_seconds_ = timeout_seconds;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized || g_mpi_live.exchange(true)) {
      fail("mpi communicator: MPI was already started in this process (make one communicator)");
    }
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_size_);
    MPI_Op_create(&bf16_reduce<ReduceOp::Sum>, 1, &bf16_ops_[0]);
    MPI_Op_create(&bf16_reduce<ReduceOp::Min>, 1, &bf16_ops_[1]);
    MPI_Op_create(&bf16_reduce<ReduceOp::Max>, 1, &bf16_ops_[2]);
    watchdog_ = std::thread([this] { watch(); });
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    for (auto& op : bf16_ops_) MPI_Op_free(&op);
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend_name() const override { return "mpi"; }
  std::string algorithm(const char* primitive) const override {
    std::string p = primitive;
    if (p == "send_recv") return "MPI_Send/MPI_Recv";
    return "Open MPI coll (tuned picks by size)";
  }

  void broadcast(Tensor x, int root) override {
    run("broadcast", [&] {
      check_root("broadcast", root, world_size_);
      check_tensor("broadcast", "x", x, DeviceKind::CPU);
      call("MPI_Bcast", MPI_Bcast(x.data, count(x.numel()), type(x.dtype), root, comm_));
    });
  }

  void scatter(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) override {
    run("scatter", [&] {
      check_root("scatter", root, world_size_);
      check_counts("scatter", counts, world_size_);
      check_tensor("scatter", "recv", recv, DeviceKind::CPU);
      check_numel("scatter", "recv", recv, counts[size_t(rank_)]);
      auto [c, d] = counts_displs(counts);
      if (rank_ == root) {
        check_tensor("scatter", "send", send, DeviceKind::CPU);
        check_numel("scatter", "send", send, offsets(counts).back());
      }
      call("MPI_Scatterv", MPI_Scatterv(send.data, c.data(), d.data(), type(recv.dtype), recv.data,
                                        c[size_t(rank_)], type(recv.dtype), root, comm_));
    });
  }

  void gather(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) override {
    run("gather", [&] {
      check_root("gather", root, world_size_);
      check_counts("gather", counts, world_size_);
      check_tensor("gather", "send", send, DeviceKind::CPU);
      check_numel("gather", "send", send, counts[size_t(rank_)]);
      auto [c, d] = counts_displs(counts);
      if (rank_ == root) {
        check_tensor("gather", "recv", recv, DeviceKind::CPU);
        check_numel("gather", "recv", recv, offsets(counts).back());
      }
      call("MPI_Gatherv", MPI_Gatherv(send.data, c[size_t(rank_)], type(send.dtype), recv.data,
                                      c.data(), d.data(), type(send.dtype), root, comm_));
    });
  }

  void reduce(Tensor send, Tensor recv, int root, ReduceOp op) override {
    run("reduce", [&] {
      check_root("reduce", root, world_size_);
      check_reducible("reduce", send.dtype);
      check_tensor("reduce", "send", send, DeviceKind::CPU);
      if (rank_ == root) {
        check_tensor("reduce", "recv", recv, DeviceKind::CPU);
        check_numel("reduce", "recv", recv, send.numel());
      }
      const void* src = (rank_ == root && send.data == recv.data) ? MPI_IN_PLACE : send.data;
      call("MPI_Reduce", MPI_Reduce(src, recv.data, count(send.numel()), type(send.dtype),
                                    mpi_op(op, send.dtype), root, comm_));
    });
  }

  void all_gather(Tensor send, Tensor recv, const std::vector<int64_t>& counts) override {
    run("all_gather", [&] {
      check_counts("all_gather", counts, world_size_);
      check_tensor("all_gather", "send", send, DeviceKind::CPU);
      check_tensor("all_gather", "recv", recv, DeviceKind::CPU);
      check_numel("all_gather", "send", send, counts[size_t(rank_)]);
      check_numel("all_gather", "recv", recv, offsets(counts).back());
      auto [c, d] = counts_displs(counts);
      call("MPI_Allgatherv", MPI_Allgatherv(send.data, c[size_t(rank_)], type(send.dtype), recv.data,
                                            c.data(), d.data(), type(send.dtype), comm_));
    });
  }

  void reduce_scatter(Tensor send, Tensor recv, const std::vector<int64_t>& counts, ReduceOp op) override {
    run("reduce_scatter", [&] {
      check_counts("reduce_scatter", counts, world_size_);
      check_reducible("reduce_scatter", send.dtype);
      check_tensor("reduce_scatter", "send", send, DeviceKind::CPU);
      check_tensor("reduce_scatter", "recv", recv, DeviceKind::CPU);
      check_numel("reduce_scatter", "send", send, offsets(counts).back());
      check_numel("reduce_scatter", "recv", recv, counts[size_t(rank_)]);
      auto [c, d] = counts_displs(counts);
      call("MPI_Reduce_scatter", MPI_Reduce_scatter(send.data, recv.data, c.data(), type(send.dtype),
                                                    mpi_op(op, send.dtype), comm_));
    });
  }

  void all_reduce(Tensor x, ReduceOp op) override {
    run("all_reduce", [&] {
      check_reducible("all_reduce", x.dtype);
      check_tensor("all_reduce", "x", x, DeviceKind::CPU);
      call("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, x.data, count(x.numel()), type(x.dtype),
                                          mpi_op(op, x.dtype), comm_));
    });
  }

  void all_to_all(Tensor send, Tensor recv, const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    run("all_to_all", [&] {
      check_counts("all_to_all", send_counts, world_size_);
      check_counts("all_to_all", recv_counts, world_size_);
      check_tensor("all_to_all", "send", send, DeviceKind::CPU);
      check_tensor("all_to_all", "recv", recv, DeviceKind::CPU);
      check_numel("all_to_all", "send", send, offsets(send_counts).back());
      check_numel("all_to_all", "recv", recv, offsets(recv_counts).back());
      auto [sc, sd] = counts_displs(send_counts);
      auto [rc, rd] = counts_displs(recv_counts);
      call("MPI_Alltoallv", MPI_Alltoallv(send.data, sc.data(), sd.data(), type(send.dtype), recv.data,
                                          rc.data(), rd.data(), type(recv.dtype), comm_));
    });
  }

  void send(Tensor x, int peer, int tag) override {
    run("send", [&] {
      check_root("send", peer, world_size_);
      check_tensor("send", "x", x, DeviceKind::CPU);
      call("MPI_Send", MPI_Send(x.data, count(x.numel()), type(x.dtype), peer, tag, comm_));
    });
  }

  void recv(Tensor x, int peer, int tag) override {
    run("recv", [&] {
      check_root("recv", peer, world_size_);
      check_tensor("recv", "x", x, DeviceKind::CPU);
      MPI_Status status;
      call("MPI_Recv", MPI_Recv(x.data, count(x.numel()), type(x.dtype), peer, tag, comm_, &status));
      int got = 0;
      MPI_Get_count(&status, type(x.dtype), &got);
      if (got != x.numel()) {
        fail("recv: rank {} sent {} elements (tag {}), rank {} expects {}", peer, got, tag, rank_,
             x.describe());
      }
    });
  }

  void barrier() override {
    run("barrier", [&] { call("MPI_Barrier", MPI_Barrier(comm_)); });
  }

  [[noreturn]] void abort(const std::string& reason) override {
    std::fprintf(stderr, "error: mpi rank %d aborted: %s\n", rank_, reason.c_str());
    std::fflush(stderr);
    MPI_Abort(comm_, 1);
    std::_Exit(1);
  }

 private:
  // Runs a primitive under the watchdog; an exception out of it ends the job (MPI_Abort), since
  // the peers are already inside the collective and would otherwise wait forever.
  template <typename F>
  void run(const char* primitive, F&& body) {
    {
      std::lock_guard lock(mu_);
      current_ = primitive;
      started_ = std::chrono::steady_clock::now();
      ++calls_;
    }
    cv_.notify_all();
    try {
      body();
    } catch (const std::exception& e) {
      abort(fmt::format("{} failed: {}", primitive, e.what()));
    }
    std::lock_guard lock(mu_);
    current_ = nullptr;
  }

  // Ends the process when one primitive outlives the timeout (a peer stuck outside MPI).
  void watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (current_ == nullptr) {
        cv_.wait(lock, [&] { return stop_ || current_ != nullptr; });
        continue;
      }
      uint64_t call = calls_;
      auto deadline = started_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(timeout_seconds_));
      cv_.wait_until(lock, deadline, [&] { return stop_ || calls_ != call || current_ == nullptr; });
      if (!stop_ && calls_ == call && current_ != nullptr &&
          std::chrono::steady_clock::now() >= deadline) {
        std::fprintf(stderr, "error: mpi rank %d waited %.1f s in %s for its peers; ending the job\n",
                     rank_, timeout_seconds_, current_);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  }

  void call(const char* fn, int rc) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail("{} returned {}: {}", fn, rc, std::string(text, size_t(len)));
  }

  static int count(int64_t n) {
    if (n > INT_MAX) fail("mpi: {} elements exceed MPI's int count", n);
    return int(n);
  }

  static std::pair<std::vector<int>, std::vector<int>> counts_displs(const std::vector<int64_t>& counts) {
    std::vector<int> c(counts.size()), d(counts.size());
    int64_t off = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      c[i] = count(counts[i]);
      d[i] = count(off);
      off += counts[i];
    }
    return {c, d};
  }

  static MPI_Datatype type(DType t) {
    switch (t) {
      case DType::F32: return MPI_FLOAT;
      case DType::I32: return MPI_INT32_T;
      case DType::I64: return MPI_INT64_T;
      case DType::BF16: return MPI_UINT16_T;
      default: break;  // data movement only: an unsigned type of the same size
    }
    switch (dtype_size(t)) {
      case 2: return MPI_UINT16_T;
      case 4: return MPI_UINT32_T;
      case 8: return MPI_UINT64_T;
    }
    return MPI_BYTE;
  }

  MPI_Op mpi_op(ReduceOp op, DType t) const {
    if (t == DType::BF16) return bf16_ops_[int(op)];
    switch (op) {
      case ReduceOp::Sum: return MPI_SUM;
      case ReduceOp::Min: return MPI_MIN;
      case ReduceOp::Max: return MPI_MAX;
    }
    return MPI_SUM;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_size_ = 1;
  MPI_Op bf16_ops_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  std::mutex mu_;
  std::condition_variable cv_;
  const char* current_ = nullptr;
  std::chrono::steady_clock::time_point started_;
  uint64_t calls_ = 0;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

bool mpi_built() { return true; }

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds) {
  return std::make_unique<MpiCommunicator>(timeout_seconds);
}

}  // namespace nanovllm
