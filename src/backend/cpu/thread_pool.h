#pragma once
// ThreadPool: a fixed team of worker threads owned by the CPU backend. Idle workers block on a
// condition variable (after at most a short bounded spin), so an idle engine burns no core.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nanovllm::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // num_threads >= 1; the caller's thread is thread 0
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }
  // Calls fn(begin, end, thread) on disjoint chunks covering [0, n), one chunk per thread
  // (contiguous, sizes differing by at most one `grain`), and returns when all are done.
  // The calling thread runs chunk 0. Not reentrant.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);
  // Calls fn(thread) once on every thread.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker(int index);
  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  bool busy_ = false;         // a dispatch is in flight (catches reentrant use)
  std::exception_ptr error_;  // the first exception a worker's chunk threw, rethrown by the caller
};

}  // namespace nanovllm::cpu
