// Every primitive of the NCCL communicator against a plain computation: the checks the threads
// and MPI communicators pass (tests/distributed/collective_checks.h), run over NCCL on one rank
// thread per GPU at world sizes 1 up to the GPUs present (at most 4). The checks hold host
// tensors; a staging communicator copies them to device buffers, runs the NCCL primitive on its
// stream, synchronizes and copies the results back. Label cuda (a GPU), and cuda_emu (the
// emulator's GPUs).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "distributed/collective_checks.h"
#include "distributed/nccl_communicator.h"
#include "distributed/thread_communicator.h"

namespace nanovllm {
namespace {

// A Communicator on host tensors over an NCCL communicator on device buffers.
class Staged final : public Communicator {
 public:
  explicit Staged(std::unique_ptr<Communicator> nccl) : nccl_(std::move(nccl)) {}
  ~Staged() override {
    for (void* p : bufs_) cudaFree(p);
  }
  int rank() const override { return nccl_->rank(); }
  int world_size() const override { return nccl_->world_size(); }
  const char* backend_name() const override { return nccl_->backend_name(); }
  std::string algorithm(const char* p) const override { return nccl_->algorithm(p); }

  void broadcast(Tensor x, int root) override {
    Tensor d = up(x);
    nccl_->broadcast(d, root);
    down(x, d);
  }
  void scatter(Tensor send, Tensor recv, int root, const std::vector<int64_t>& c) override {
    Tensor s = up(send), r = up(recv);
    nccl_->scatter(s, r, root, c);
    down(recv, r);
  }
  void gather(Tensor send, Tensor recv, int root, const std::vector<int64_t>& c) override {
    Tensor s = up(send), r = up(recv);
    nccl_->gather(s, r, root, c);
    down(recv, r);
  }
  void reduce(Tensor send, Tensor recv, int root, ReduceOp op) override {
    Tensor s = up(send);
    Tensor r = recv.data == send.data ? s : up(recv);  // aliasing kept
    nccl_->reduce(s, r, root, op);
    down(recv, r);
  }
  void all_gather(Tensor send, Tensor recv, const std::vector<int64_t>& c) override {
    Tensor s = up(send), r = up(recv);
    nccl_->all_gather(s, r, c);
    down(recv, r);
  }
  void reduce_scatter(Tensor send, Tensor recv, const std::vector<int64_t>& c,
                      ReduceOp op) override {
    Tensor s = up(send), r = up(recv);
    nccl_->reduce_scatter(s, r, c, op);
    down(recv, r);
  }
  void all_reduce(Tensor x, ReduceOp op) override {
    Tensor d = up(x);
    nccl_->all_reduce(d, op);
    down(x, d);
  }
  void all_to_all(Tensor send, Tensor recv, const std::vector<int64_t>& sc,
                  const std::vector<int64_t>& rc) override {
    Tensor s = up(send), r = up(recv);
    nccl_->all_to_all(s, r, sc, rc);
    down(recv, r);
  }
  void send(Tensor x, int peer, int tag) override {
    Tensor d = up(x);
    nccl_->send(d, peer, tag);
    nccl_->synchronize();
  }
  void recv(Tensor x, int peer, int tag) override {
    Tensor d = up(x);
    nccl_->recv(d, peer, tag);
    down(x, d);
  }
  void barrier() override { nccl_->barrier(); }
  void abort(const std::string& reason) override { nccl_->abort(reason); }

 private:
  // A device copy of a contiguous host tensor (at least one byte, so never null).
  Tensor up(const Tensor& h) {
    void* p = nullptr;
    const size_t bytes = h.nbytes();
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) fail("staging: cudaMalloc failed");
    bufs_.push_back(p);
    if (bytes && cudaMemcpy(p, h.data, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      fail("staging: upload failed");
    Tensor d = h;
    d.data = p;
    d.device = DeviceKind::CUDA;
    return d;
  }
  void down(Tensor h, const Tensor& d) {
    nccl_->synchronize();
    if (h.nbytes() && cudaMemcpy(h.data, d.data, h.nbytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
      fail("staging: download failed");
  }

  std::unique_ptr<Communicator> nccl_;
  std::vector<void*> bufs_;
};

TEST(NcclCollectives, EveryPrimitiveMatchesPlainComputation) {
  ASSERT_TRUE(nccl_built())
      << "built without NCCL: install it with the CUDA toolkit and configure again";
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  ASSERT_GE(gpus, 1);
  for (int p = 1; p <= std::min(gpus, 4); ++p) {
    auto group = make_thread_group(p, 120);
    std::mutex mu;
    std::vector<std::string> failures, errors(static_cast<size_t>(p));
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto boot = make_thread_communicator(group, r);
          Staged staged(make_nccl_communicator(boot.get(), r));
          auto f = test::CollectiveChecks(staged).run_all();
          std::lock_guard lock(mu);
          failures.insert(failures.end(), f.begin(), f.end());
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < p; ++r) EXPECT_EQ(errors[size_t(r)], "") << "world " << p << " rank " << r;
    EXPECT_TRUE(failures.empty()) << "world " << p << ": " << failures.size()
                                  << " failures, first: " << (failures.empty() ? "" : failures[0]);
    std::printf("nccl world %d: %zu failures\n", p, failures.size());
  }
}

}  // namespace
}  // namespace nanovllm
