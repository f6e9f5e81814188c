#include "backend/cpu/thread_pool.h"

#include <atomic>
#include <chrono>

#include "util/check.h"

namespace nanovllm::cpu {

namespace {

// How long a worker keeps polling for the next task after finishing one (and the caller for
// the workers to finish) before it blocks on a condition variable. Back-to-back kernels of a
// decode step then skip the futex wake; an idle pool sleeps after this long.
constexpr auto kSpinTime = std::chrono::microseconds(50);
constexpr auto kPureSpinTime = std::chrono::microseconds(3);

inline void cpu_relax() { __builtin_ia32_pause(); }

// Polls pred() for at most kSpinTime; true if it became true. After the first few microseconds
// it yields between polls: when the machine is oversubscribed, the thread being waited for may
// be queued on this very core, and a pure spin would hold it off for the whole window.
template <typename Pred>
bool spin_until(Pred pred) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > kSpinTime) return pred();
    if (waited > kPureSpinTime) std::this_thread::yield();
  }
}

}  // namespace

// generation_, pending_, joins_, busy_ and the task are read without the mutex while spinning,
// so every access to them goes through std::atomic_ref; the mutex orders the sleeping paths.
// A worker may skip a shared task entirely (it woke after the caller closed it): the next task
// it sees is simply the newest one.
ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  NV_CHECK(num_threads >= 1, "ThreadPool needs at least one thread, got {}", num_threads);
  workers_.reserve(size_t(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
  std::atomic_ref<uint64_t> generation(generation_);
  std::atomic_ref<int> pending(pending_);
  std::atomic_ref<uint64_t> joins(joins_);
  std::atomic_ref<const std::function<void(int)>*> task_ref(task_);
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
    }
    // The generation's low bit says whether the task is shared. The task pointer is read only
    // once it cannot change: a run_on_all task waits for every worker, and a shared one for
    // every worker that joined it.
    const uint64_t g = generation.load(std::memory_order_acquire);
    seen = g;
    const bool shared = g & 1;
    if (shared) {  // join unless the caller is done with it (or a newer task replaced it)
      uint64_t j = joins.load(std::memory_order_acquire);
      bool joined = false;
      while ((j >> 32) == (g & 0xffffffffu) && !(j & kClosed))
        if (joins.compare_exchange_weak(j, j + 1, std::memory_order_acq_rel)) {
          joined = true;
          break;
        }
      if (!joined) continue;
    }
    const std::function<void(int)>* task = task_ref.load(std::memory_order_acquire);
    try {
      (*task)(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    const bool last = shared ? ((joins.fetch_sub(1, std::memory_order_acq_rel) - 1) & kActive) == 0
                             : pending.fetch_sub(1, std::memory_order_acq_rel) == 1;
    if (last) {
      std::lock_guard<std::mutex> lock(mutex_);  // the caller may be about to sleep on done_
      done_.notify_one();
    }
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) { dispatch(fn, false); }

void ThreadPool::run_shared(const std::function<void(int)>& fn) { dispatch(fn, true); }

void ThreadPool::dispatch(const std::function<void(int)>& fn, bool shared) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  std::atomic_ref<bool> busy(busy_);
  NV_CHECK(!busy.exchange(true, std::memory_order_acquire),
           "ThreadPool is not reentrant: a dispatch is already in flight");
  std::atomic_ref<uint64_t> generation(generation_);
  std::atomic_ref<int> pending(pending_);
  std::atomic_ref<uint64_t> joins(joins_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::atomic_ref<const std::function<void(int)>*>(task_).store(&fn, std::memory_order_relaxed);
    error_ = nullptr;
    // The next generation, its low bit the task's kind.
    const uint64_t g = ((generation.load(std::memory_order_relaxed) >> 1) + 1) << 1 | uint64_t(shared);
    pending.store(shared ? 0 : num_threads_ - 1, std::memory_order_relaxed);
    joins.store((g & 0xffffffffu) << 32, std::memory_order_relaxed);
    generation.store(g, std::memory_order_release);
  }
  wake_.notify_all();  // cheap when every worker is still spinning (no waiters)

  std::exception_ptr caller_error;
  try {
    fn(0);
  } catch (...) {
    caller_error = std::current_exception();
  }
  // run_on_all: every worker; run_shared: the workers that joined before it closed.
  auto done = [&] {
    return shared ? (joins.load(std::memory_order_acquire) & kActive) == 0
                  : pending.load(std::memory_order_acquire) == 0;
  };
  if (shared) joins.fetch_or(kClosed, std::memory_order_acq_rel);
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, done);
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = caller_error ? caller_error : error_;
    error_ = nullptr;
  }
  busy.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t units = (n + grain - 1) / grain;
  const int64_t active = units < num_threads_ ? units : num_threads_;
  if (active == 1) {
    fn(0, n, 0);
    return;
  }
  // Chunk c gets units/active units of `grain`, the last units%active chunks one more (the
  // last chunk is the one cut short by n, so the sizes stay within one grain of each other).
  const int64_t base = units / active, extra = units % active;
  auto chunk = [&](int t, int64_t* begin, int64_t* end) {
    int64_t first_long = active - extra;
    int64_t u0 = t * base + (t > first_long ? t - first_long : 0);
    int64_t u1 = u0 + base + (t >= first_long ? 1 : 0);
    *begin = u0 * grain;
    *end = u1 * grain < n ? u1 * grain : n;
  };
  // The caller (thread 0) runs chunk 0 itself, as documented: a worker that wakes first starts
  // at chunk 1 (claiming chunk 0 from the counter let a fast worker take it now and then).
  std::atomic<int64_t> next{1};
  run_shared([&](int t) {
    if (t == 0) {
      int64_t begin, end;
      chunk(0, &begin, &end);
      if (begin < end) fn(begin, end, t);
    }
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < active;) {
      int64_t begin, end;
      chunk(int(c), &begin, &end);
      if (begin < end) fn(begin, end, t);
    }
  });
}

}  // namespace nanovllm::cpu
