#pragma once
// ThreadPool: a fixed team of worker threads owned by the CPU backend. Idle workers block on a
// condition variable (after at most a short bounded spin), so an idle engine burns no core.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace nanovllm::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // num_threads >= 1; the caller's thread is thread 0
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }
  // Calls fn(begin, end, thread) on disjoint chunks covering [0, n), as many chunks as threads
  // (contiguous, sizes differing by at most one `grain`), and returns when all are done. The
  // chunks are claimed (run_shared): the calling thread runs chunk 0, and a thread may run
  // several when another starts late. Not reentrant.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);
  // Calls fn(thread) once on every thread.
  void run_on_all(const std::function<void(int)>& fn);
  // For work-sharing loops (each call claims units from a shared counter until none are left):
  // calls fn(thread) on the caller and on every worker that picks the task up before the
  // caller's own call has returned, and returns once those calls have. A worker that is asleep
  // or waiting for its core (the machine shared with other processes; one of many cores) then
  // costs nothing: the others take its units, and nobody waits for it to wake.
  void run_shared(const std::function<void(int)>& fn);

 private:
  static constexpr uint64_t kClosed = uint64_t(1) << 31;
  static constexpr uint64_t kActive = kClosed - 1;
  void dispatch(const std::function<void(int)>& fn, bool shared);
  void worker(int index);
  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;   // dispatches << 1 | 1 for a run_shared task (joined via joins_)
  int pending_ = 0;           // run_on_all: workers yet to finish the task
  // run_shared: (low 32 bits of the task's generation) << 32 | closed << 31 | workers running it.
  // Closed once the caller's own call returns: no worker joins after that.
  uint64_t joins_ = 0;
  bool stop_ = false;
  bool busy_ = false;         // a dispatch is in flight (catches reentrant use)
  std::exception_ptr error_;  // the first exception a worker's chunk threw, rethrown by the caller
};

// fn(u0, u1, thread), or fn(u0, u1) where fn does not take the thread.
template <typename Fn>
void call_chunk(const Fn& fn, int64_t u0, int64_t u1, int thread) {
  if constexpr (std::is_invocable_v<const Fn&, int64_t, int64_t, int>)
    fn(u0, u1, thread);
  else
    fn(u0, u1);
}

// Calls fn(u0, u1) on chunks of `chunk` units covering [0, units) (fn(u0, u1, thread) where fn
// takes the claiming thread's index too: per-thread scratch), which the pool's threads claim in
// order from a shared counter rather than as fixed shares (ThreadPool::run_shared): a
// thread that starts late (woken from sleep, or sharing its core with another process) or
// streams memory more slowly costs only the chunks it takes, and none once the others have
// taken them all.
template <typename Fn>
void run_chunks(ThreadPool& pool, int64_t units, int64_t chunk, const Fn& fn) {
  std::atomic<int64_t> next{0};
  auto run = [&](int thread) {
    for (int64_t u0; (u0 = next.fetch_add(chunk, std::memory_order_relaxed)) < units;)
      call_chunk(fn, u0, std::min(units, u0 + chunk), thread);
  };
  if (pool.size() == 1 || units <= chunk)
    run(0);
  else
    pool.run_shared(run);
}

// Calls fn(u0, u1) on chunks of at most `chunk` units covering [0, units), like run_chunks, but
// each thread first walks a contiguous share of its own, [t * units / T, (t + 1) * units / T)
// in order, and only then takes chunks from the far end of the others' shares (a thread that
// starts late, or runs slowly, loses the end of its share to the others). A thread's units then
// follow one another in memory wherever the units are consecutive blocks of one array (a GEMM's
// weight groups): one long stream a thread, which the hardware prefetchers and the tiles'
// near-ahead prefetch follow across units, instead of runs of `chunk` units interleaved
// between the threads.
template <typename Fn>
void run_ranges(ThreadPool& pool, int64_t units, int64_t chunk, const Fn& fn) {
  const int threads = pool.size();
  if (threads == 1 || units <= chunk || units >= (int64_t(1) << 32))  // (32-bit bounds)
    return run_chunks(pool, units, chunk, fn);
  // Share t: [front, back) as (front << 32 | back), on a line of its own; the owner takes
  // chunks from the front, the others from the back.
  struct alignas(64) Share {
    std::atomic<uint64_t> range;
  };
  std::vector<Share> shares(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t)
    shares[size_t(t)].range.store(
        uint64_t(units * t / threads) << 32 | uint64_t(units * (t + 1) / threads),
        std::memory_order_relaxed);
  // Claims up to `chunk` units of share t from the front (owner) or the back; false if empty.
  auto claim = [&](int t, bool front, int64_t& u0, int64_t& u1) {
    std::atomic<uint64_t>& r = shares[size_t(t)].range;
    uint64_t v = r.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t f = int64_t(v >> 32), b = int64_t(v & 0xffffffffu);
      if (f >= b) return false;
      u0 = front ? f : std::max(f, b - chunk);
      u1 = front ? std::min(b, f + chunk) : b;
      const uint64_t next =
          front ? (uint64_t(u1) << 32 | uint64_t(b)) : (uint64_t(f) << 32 | uint64_t(u0));
      if (r.compare_exchange_weak(v, next, std::memory_order_relaxed)) return true;
    }
  };
  pool.run_shared([&](int thread) {
    int64_t u0, u1;
    while (claim(thread, true, u0, u1)) call_chunk(fn, u0, u1, thread);
    for (int k = 1; k < threads; ++k) {
      const int t = (thread + k) % threads;
      while (claim(t, false, u0, u1)) call_chunk(fn, u0, u1, thread);
    }
  });
}

}  // namespace nanovllm::cpu
