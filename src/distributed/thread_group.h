#pragma once
// ThreadGroup: the state the thread ranks of one group share (internal to the threads
// communicator): a failing barrier, the buffer pointers each rank publishes for a collective,
// and the mailboxes of send/recv.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace nanovllm {

class ThreadGroup {
 public:
  // What a rank publishes before the first barrier of a collective.
  struct Slot {
    const char* primitive = nullptr;
    const void* send = nullptr;
    void* recv = nullptr;
    const std::vector<int64_t>* counts = nullptr;  // all_to_all: this rank's send_counts
    int64_t numel = 0;
    DType dtype = DType::F32;
    int root = 0;
  };

  ThreadGroup(int world_size, double timeout_seconds);
  int world_size() const { return world_size_; }
  double timeout_seconds() const { return timeout_seconds_; }

  // Hands out rank's seat once.
  void claim(int rank);
  // Returns once every rank has arrived; throws Error if the group failed, a rank left, or
  // `timeout_seconds` passed (which fails the group, naming the ranks that never came).
  void arrive_and_wait(int rank, const char* primitive, double timeout_seconds);
  // Fails the group (the first failure wins) and wakes every waiting rank.
  void fail(std::string message);
  // rank's communicator is gone: ranks waiting for it (now or later) fail.
  void leave(int rank);

  // Buffered point to point.
  void post(int src, int dst, int tag, const Tensor& x);
  void take(int src, int dst, int tag, const Tensor& x, double timeout_seconds);

  Slot& slot(int rank) { return slots_[size_t(rank)]; }

 private:
  struct Message {
    int src = 0;
    int tag = 0;
    DType dtype = DType::F32;
    int64_t numel = 0;
    std::vector<char> bytes;
  };
  [[noreturn]] void throw_failure(int rank);  // with mu_ held
  void fail_locked(std::string message);

  const int world_size_;
  const double timeout_seconds_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  const char* waiting_in_ = nullptr;
  std::vector<char> here_;     // [world_size] arrived at the current barrier
  std::vector<char> claimed_;  // [world_size]
  std::vector<char> left_;     // [world_size]
  bool failed_ = false;
  std::string failure_;
  std::vector<std::deque<Message>> mailbox_;  // [world_size] by destination
};

}  // namespace nanovllm
