#include "distributed/thread_group.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "util/check.h"

namespace nanovllm {

namespace {
std::string rank_list(const std::vector<char>& flags, char want) {
  std::string s;
  for (size_t r = 0; r < flags.size(); ++r) {
    if (flags[r] == want) s += (s.empty() ? "" : ", ") + std::to_string(r);
  }
  return s;
}

std::chrono::steady_clock::time_point deadline_after(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(seconds));
}
}  // namespace

ThreadGroup::ThreadGroup(int world_size, double timeout_seconds)
    : world_size_(world_size),
      timeout_seconds_(timeout_seconds),
      slots_(size_t(world_size)),
      here_(size_t(world_size), 0),
      claimed_(size_t(world_size), 0),
      left_(size_t(world_size), 0),
      mailbox_(size_t(world_size)) {}

void ThreadGroup::claim(int rank) {
  std::lock_guard lock(mu_);
  if (rank < 0 || rank >= world_size_) nanovllm::fail("threads: rank {} outside the world [0, {})", rank, world_size_);
  if (claimed_[size_t(rank)]) nanovllm::fail("threads: rank {} already has a communicator", rank);
  claimed_[size_t(rank)] = 1;
}

void ThreadGroup::throw_failure(int rank) {
  throw Error(fmt::format("threads communicator (rank {}): {}", rank, failure_));
}

void ThreadGroup::fail_locked(std::string message) {
  if (failed_) return;
  failed_ = true;
  failure_ = std::move(message);
  cv_.notify_all();
}

void ThreadGroup::fail(std::string message) {
  std::lock_guard lock(mu_);
  fail_locked(std::move(message));
}

void ThreadGroup::leave(int rank) {
  std::lock_guard lock(mu_);
  left_[size_t(rank)] = 1;
  if (arrived_ > 0 && !here_[size_t(rank)]) {
    fail_locked(fmt::format("rank {} left the group (its communicator was destroyed) while ranks "
                            "{} wait in {}", rank, rank_list(here_, 1), waiting_in_));
  }
  cv_.notify_all();
}

void ThreadGroup::arrive_and_wait(int rank, const char* primitive, double timeout_seconds) {
  std::unique_lock lock(mu_);
  if (failed_) throw_failure(rank);
  for (int r = 0; r < world_size_; ++r) {
    if (left_[size_t(r)]) {
      fail_locked(fmt::format("rank {} left the group (its communicator was destroyed) before rank {} "
                              "ran {}", r, rank, primitive));
      throw_failure(rank);
    }
  }
  uint64_t gen = generation_;
  here_[size_t(rank)] = 1;
  waiting_in_ = primitive;
  if (++arrived_ == world_size_) {
    arrived_ = 0;
    std::fill(here_.begin(), here_.end(), 0);
    ++generation_;
    cv_.notify_all();
    return;
  }
  auto deadline = deadline_after(timeout_seconds);
  bool done = cv_.wait_until(lock, deadline, [&] { return generation_ != gen || failed_; });
  if (generation_ != gen) return;
  if (!done) {
    fail_locked(fmt::format("rank {} waited {:.1f} s in {} for ranks {} that never came", rank,
                            timeout_seconds, primitive, rank_list(here_, 0)));
  }
  throw_failure(rank);
}

void ThreadGroup::post(int src, int dst, int tag, const Tensor& x) {
  Message m;
  m.src = src;
  m.tag = tag;
  m.dtype = x.dtype;
  m.numel = x.numel();
  m.bytes.resize(x.nbytes());
  if (x.nbytes() > 0) std::memcpy(m.bytes.data(), x.data, x.nbytes());
  std::lock_guard lock(mu_);
  if (failed_) throw_failure(src);
  if (left_[size_t(dst)]) {
    fail_locked(fmt::format("rank {} sends to rank {}, which has left the group", src, dst));
    throw_failure(src);
  }
  mailbox_[size_t(dst)].push_back(std::move(m));
  cv_.notify_all();
}

void ThreadGroup::take(int src, int dst, int tag, const Tensor& x, double timeout_seconds) {
  std::unique_lock lock(mu_);
  auto& box = mailbox_[size_t(dst)];
  auto find = [&] {
    for (auto it = box.begin(); it != box.end(); ++it) {
      if (it->src == src && it->tag == tag) return it;
    }
    return box.end();
  };
  auto deadline = deadline_after(timeout_seconds);
  auto it = box.end();
  bool ok = cv_.wait_until(lock, deadline, [&] {
    it = find();
    return it != box.end() || failed_ || left_[size_t(src)];
  });
  if (it == box.end()) {
    if (!failed_) {
      fail_locked(ok ? fmt::format("rank {} waits in recv for rank {}, which has left the group", dst, src)
                     : fmt::format("rank {} waited {:.1f} s in recv for a message from rank {} (tag {})",
                                   dst, timeout_seconds, src, tag));
    }
    throw_failure(dst);
  }
  Message m = std::move(*it);
  box.erase(it);
  lock.unlock();
  if (m.dtype != x.dtype || m.numel != x.numel()) {
    nanovllm::fail("recv: rank {} sent {} {} elements (tag {}), rank {} expects {}", src, m.numel,
         dtype_name(m.dtype), tag, dst, x.describe());
  }
  if (!m.bytes.empty()) std::memcpy(x.data, m.bytes.data(), m.bytes.size());
}

}  // namespace nanovllm
