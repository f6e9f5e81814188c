#include "distributed/thread_communicator.h"

#include <cstring>

#include <fmt/format.h>

#include "distributed/thread_group.h"

namespace nanovllm {

using namespace comm_detail;

namespace {

char* byte_at(const void* p, int64_t elem, DType dtype) {
  return static_cast<char*>(const_cast<void*>(p)) + elem * int64_t(dtype_size(dtype));
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {
    group_->claim(rank);
    timeout_seconds_ = group_->timeout_seconds();
  }
  ~ThreadCommunicator() override { group_->leave(rank_); }

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  const char* backend_name() const override { return "threads"; }
  std::string algorithm(const char* primitive) const override {
    std::string p = primitive;
    if (p == "all_reduce") return "ring (reduce-scatter + all-gather, 2(p-1) steps)";
    if (p == "reduce_scatter" || p == "reduce") return "direct (each rank reduces its 1/p chunk)";
    if (p == "send_recv") return "buffered mailbox";
    if (p == "barrier") return "condition variable";
    return "direct (shared-memory copies)";
  }

  void broadcast(Tensor x, int root) override {
    run("broadcast", [&] {
      check_root("broadcast", root, world_size());
      check_tensor("broadcast", "x", x, DeviceKind::CPU);
      meet({"broadcast", x.data, x.data, nullptr, x.numel(), x.dtype, root});
      int64_t root_numel = group_->slot(root).numel;
      if (root_numel != x.numel()) {
        fail("broadcast: rank {} has {} elements, root {} has {}", rank_, x.numel(), root, root_numel);
      }
      if (rank_ != root && x.nbytes() > 0) std::memcpy(x.data, group_->slot(root).send, x.nbytes());
      sync("broadcast");
    });
  }

  void scatter(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) override {
    run("scatter", [&] {
      check_root("scatter", root, world_size());
      check_counts("scatter", counts, world_size());
      auto off = offsets(counts);
      check_tensor("scatter", "recv", recv, DeviceKind::CPU);
      check_numel("scatter", "recv", recv, counts[size_t(rank_)]);
      if (rank_ == root) {
        check_tensor("scatter", "send", send, DeviceKind::CPU);
        check_numel("scatter", "send", send, off.back());
      }
      meet({"scatter", send.data, recv.data, nullptr, off.back(), recv.dtype, root});
      if (recv.nbytes() > 0) {
        std::memcpy(recv.data, byte_at(group_->slot(root).send, off[size_t(rank_)], recv.dtype), recv.nbytes());
      }
      sync("scatter");
    });
  }

  void gather(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) override {
    run("gather", [&] {
      check_root("gather", root, world_size());
      check_counts("gather", counts, world_size());
      auto off = offsets(counts);
      check_tensor("gather", "send", send, DeviceKind::CPU);
      check_numel("gather", "send", send, counts[size_t(rank_)]);
      if (rank_ == root) {
        check_tensor("gather", "recv", recv, DeviceKind::CPU);
        check_numel("gather", "recv", recv, off.back());
      }
      meet({"gather", send.data, recv.data, nullptr, off.back(), send.dtype, root});
      void* dst = byte_at(group_->slot(root).recv, off[size_t(rank_)], send.dtype);
      if (send.nbytes() > 0 && dst != send.data) std::memmove(dst, send.data, send.nbytes());
      sync("gather");
    });
  }

  void reduce(Tensor send, Tensor recv, int root, ReduceOp op) override {
    run("reduce", [&] {
      check_root("reduce", root, world_size());
      check_reducible("reduce", send.dtype);
      check_tensor("reduce", "send", send, DeviceKind::CPU);
      if (rank_ == root) {
        check_tensor("reduce", "recv", recv, DeviceKind::CPU);
        check_numel("reduce", "recv", recv, send.numel());
      }
      meet({"reduce", send.data, recv.data, nullptr, send.numel(), send.dtype, root});
      auto off = offsets(even_split(send.numel()));
      int64_t begin = off[size_t(rank_)], n = off[size_t(rank_) + 1] - begin;
      reduce_chunk(begin, n, send.dtype, op, scratch(n, send.dtype));
      if (n > 0) std::memcpy(byte_at(group_->slot(root).recv, begin, send.dtype), scratch_.data(), size_t(n) * dtype_size(send.dtype));
      sync("reduce");
    });
  }

  void all_gather(Tensor send, Tensor recv, const std::vector<int64_t>& counts) override {
    run("all_gather", [&] {
      check_counts("all_gather", counts, world_size());
      auto off = offsets(counts);
      check_tensor("all_gather", "send", send, DeviceKind::CPU);
      check_tensor("all_gather", "recv", recv, DeviceKind::CPU);
      check_numel("all_gather", "send", send, counts[size_t(rank_)]);
      check_numel("all_gather", "recv", recv, off.back());
      meet({"all_gather", send.data, recv.data, nullptr, off.back(), send.dtype, 0});
      for (int r = 0; r < world_size(); ++r) {
        void* dst = byte_at(recv.data, off[size_t(r)], recv.dtype);
        const void* src = group_->slot(r).send;
        if (counts[size_t(r)] > 0 && dst != src) {
          std::memcpy(dst, src, size_t(counts[size_t(r)]) * dtype_size(recv.dtype));
        }
      }
      sync("all_gather");
    });
  }

  void reduce_scatter(Tensor send, Tensor recv, const std::vector<int64_t>& counts, ReduceOp op) override {
    run("reduce_scatter", [&] {
      check_counts("reduce_scatter", counts, world_size());
      check_reducible("reduce_scatter", send.dtype);
      auto off = offsets(counts);
      check_tensor("reduce_scatter", "send", send, DeviceKind::CPU);
      check_tensor("reduce_scatter", "recv", recv, DeviceKind::CPU);
      check_numel("reduce_scatter", "send", send, off.back());
      check_numel("reduce_scatter", "recv", recv, counts[size_t(rank_)]);
      meet({"reduce_scatter", send.data, recv.data, nullptr, off.back(), send.dtype, 0});
      int64_t n = counts[size_t(rank_)];
      void* acc = overlaps(recv.data, recv.nbytes(), send.data, send.nbytes()) ? scratch(n, send.dtype) : recv.data;
      reduce_chunk(off[size_t(rank_)], n, send.dtype, op, acc);
      if (acc != recv.data && n > 0) std::memcpy(recv.data, acc, recv.nbytes());
      sync("reduce_scatter");
    });
  }

  void all_reduce(Tensor x, ReduceOp op) override {
    run("all_reduce", [&] {
      check_reducible("all_reduce", x.dtype);
      check_tensor("all_reduce", "x", x, DeviceKind::CPU);
      meet({"all_reduce", x.data, x.data, nullptr, x.numel(), x.dtype, 0});
      const int p = world_size();
      if (p == 1) return;
      auto off = offsets(even_split(x.numel()));
      const void* left = group_->slot((rank_ + p - 1) % p).send;
      size_t es = dtype_size(x.dtype);
      // Reduce-scatter: at step s rank r adds its left neighbour's partial chunk (r-1-s) mod p;
      // afterwards rank r holds the full sum of chunk (r+1) mod p.
      for (int s = 0; s < p - 1; ++s) {
        size_t c = size_t(((rank_ - 1 - s) % p + p) % p);
        reduce_into(byte_at(x.data, off[c], x.dtype), byte_at(left, off[c], x.dtype),
                    off[c + 1] - off[c], x.dtype, op);
        sync("all_reduce");
      }
      // All-gather: at step s rank r copies the finished chunk (r-s) mod p from its left.
      for (int s = 0; s < p - 1; ++s) {
        size_t c = size_t(((rank_ - s) % p + p) % p);
        std::memcpy(byte_at(x.data, off[c], x.dtype), byte_at(left, off[c], x.dtype),
                    size_t(off[c + 1] - off[c]) * es);
        sync("all_reduce");
      }
    });
  }

  void all_to_all(Tensor send, Tensor recv, const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    run("all_to_all", [&] {
      check_counts("all_to_all", send_counts, world_size());
      check_counts("all_to_all", recv_counts, world_size());
      auto roff = offsets(recv_counts);
      check_tensor("all_to_all", "send", send, DeviceKind::CPU);
      check_tensor("all_to_all", "recv", recv, DeviceKind::CPU);
      check_numel("all_to_all", "send", send, offsets(send_counts).back());
      check_numel("all_to_all", "recv", recv, roff.back());
      meet({"all_to_all", send.data, recv.data, &send_counts, send.numel(), send.dtype, 0});
      for (int j = 0; j < world_size(); ++j) {
        const auto& theirs = *group_->slot(j).counts;
        if (theirs[size_t(rank_)] != recv_counts[size_t(j)]) {
          fail("all_to_all: rank {} sends {} elements to rank {}, which expects {}", j,
               theirs[size_t(rank_)], rank_, recv_counts[size_t(j)]);
        }
        int64_t soff = 0;
        for (int k = 0; k < rank_; ++k) soff += theirs[size_t(k)];
        if (recv_counts[size_t(j)] > 0) {
          std::memcpy(byte_at(recv.data, roff[size_t(j)], recv.dtype),
                      byte_at(group_->slot(j).send, soff, recv.dtype),
                      size_t(recv_counts[size_t(j)]) * dtype_size(recv.dtype));
        }
      }
      sync("all_to_all");
    });
  }

  void send(Tensor x, int peer, int tag) override {
    run("send", [&] {
      check_root("send", peer, world_size());
      check_tensor("send", "x", x, DeviceKind::CPU);
      group_->post(rank_, peer, tag, x);
    });
  }

  void recv(Tensor x, int peer, int tag) override {
    run("recv", [&] {
      check_root("recv", peer, world_size());
      check_tensor("recv", "x", x, DeviceKind::CPU);
      group_->take(peer, rank_, tag, x, timeout_seconds_);
    });
  }

  void barrier() override {
    run("barrier", [&] { sync("barrier"); });
  }

  void abort(const std::string& reason) override {
    group_->fail(fmt::format("rank {} aborted: {}", rank_, reason));
  }

 private:
  // Runs a primitive; an exception out of it fails the whole group, so no peer waits for us.
  template <typename F>
  void run(const char* primitive, F&& body) {
    try {
      body();
    } catch (const std::exception& e) {
      group_->fail(fmt::format("rank {} failed in {}: {}", rank_, primitive, e.what()));
      throw;
    }
  }

  void sync(const char* primitive) { group_->arrive_and_wait(rank_, primitive, timeout_seconds_); }

  // Publishes this rank's buffers, waits for every rank, checks they all run the same call.
  void meet(const ThreadGroup::Slot& mine) {
    group_->slot(rank_) = mine;
    sync(mine.primitive);
    for (int r = 0; r < world_size(); ++r) {
      const auto& s = group_->slot(r);
      if (std::strcmp(s.primitive, mine.primitive) != 0 || s.root != mine.root ||
          s.dtype != mine.dtype) {
        fail("rank {} called {}({}, root {}) while rank {} called {}({}, root {})", r, s.primitive,
             dtype_name(s.dtype), s.root, rank_, mine.primitive, dtype_name(mine.dtype), mine.root);
      }
    }
  }

  std::vector<int64_t> even_split(int64_t n) const {
    const int p = world_size();
    std::vector<int64_t> counts(static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) counts[size_t(r)] = n / p + (r < n % p ? 1 : 0);
    return counts;
  }

  void* scratch(int64_t n, DType dtype) {
    scratch_.resize(size_t(n) * dtype_size(dtype));
    return scratch_.data();
  }

  // acc[0, n) = op over ranks (in rank order) of slot(r).send[begin, begin + n).
  void reduce_chunk(int64_t begin, int64_t n, DType dtype, ReduceOp op, void* acc) {
    if (n == 0) return;
    std::memcpy(acc, byte_at(group_->slot(0).send, begin, dtype), size_t(n) * dtype_size(dtype));
    for (int r = 1; r < world_size(); ++r) {
      reduce_into(acc, byte_at(group_->slot(r).send, begin, dtype), n, dtype, op);
    }
  }

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::vector<char> scratch_;
};

}  // namespace

std::shared_ptr<ThreadGroup> make_thread_group(int world_size, double timeout_seconds) {
  if (world_size < 1) fail("threads communicator: world size {} (need at least 1)", world_size);
  return std::make_shared<ThreadGroup>(world_size, timeout_seconds);
}

std::unique_ptr<Communicator> make_thread_communicator(const std::shared_ptr<ThreadGroup>& group,
                                                       int rank) {
  return std::make_unique<ThreadCommunicator>(group, rank);
}

}  // namespace nanovllm
