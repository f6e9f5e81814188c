// ThreadPool under ThreadSanitizer (this file, thread_pool.cpp and check.cpp are built with
// -fsanitize=thread on their own; see CMakeLists.txt): thousands of run_shared, run_on_all and
// parallel_for dispatches back to back, with and without sleeping workers, on 2 to 4 threads.
// The units are plain ints written by whichever thread claims them, so a unit run twice, a call
// that outlives its dispatch or a missing happens-before is a TSan report or a failed count.
// (A worker reading a newer task under an older generation ran a run_on_all twice and
// deadlocked this test before the fix that keeps the task's kind in the generation.) run_ranges
// (each thread's own contiguous share first, then the others' ends) is checked the same way, and
// for the order it promises: a worker starts at the front of its share and walks it in order, and
// a thread held up in its first unit has the end of its share taken by the others.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace nanovllm::cpu {
namespace {

TEST(ThreadPoolTsan, MixedDispatchesRaceFree) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 2000; ++rep) {
      const int64_t units = 1 + rep % 13;
      std::atomic<int64_t> next{0};
      std::vector<int> hits(static_cast<size_t>(units), 0);
      pool.run_shared([&](int) {
        for (int64_t u; (u = next.fetch_add(1)) < units;) {
          volatile int spin = 0;
          for (int k = 0; k < 500; ++k) spin = spin + k;
          hits[size_t(u)]++;
        }
      });
      for (int64_t u = 0; u < units; ++u) ASSERT_EQ(hits[size_t(u)], 1) << "unit " << u << ", rep " << rep;
      if (rep % 5 == 0) {
        std::vector<int> all(static_cast<size_t>(threads), 0);
        pool.run_on_all([&](int t) { all[size_t(t)]++; });
        for (int t = 0; t < threads; ++t) ASSERT_EQ(all[size_t(t)], 1) << "thread " << t << ", rep " << rep;
      }
      if (rep % 7 == 0) {
        std::vector<int> h(100, 0);
        pool.parallel_for(100, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) h[size_t(i)]++;
        }, 3);
        for (int i = 0; i < 100; ++i) ASSERT_EQ(h[size_t(i)], 1) << "index " << i << ", rep " << rep;
      }
      if (rep % 400 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // workers sleep
    }
  }
}

TEST(ThreadPoolTsan, RunRangesEachUnitOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 1500; ++rep) {
      const int64_t units = 1 + rep % 97, chunk = 1 + rep % 9;
      std::vector<int> hits(static_cast<size_t>(units), 0);
      run_ranges(pool, units, chunk, [&](int64_t u0, int64_t u1) {
        ASSERT_LT(u0, u1);
        ASSERT_LE(u1 - u0, chunk);
        for (int64_t u = u0; u < u1; ++u) {
          volatile int spin = 0;
          for (int k = 0; k < 200; ++k) spin = spin + k;
          hits[size_t(u)]++;
        }
      });
      for (int64_t u = 0; u < units; ++u)
        ASSERT_EQ(hits[size_t(u)], 1) << "unit " << u << " of " << units << ", chunk " << chunk
                                      << ", " << threads << " threads";
      if (rep % 400 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// Thread 0 (the caller) waits in its first unit until another thread has run a unit of its
// share: the worker must first walk its own share [32, 64) from its front, in order, then take
// thread 0's units from the back.
TEST(ThreadPoolTsan, RunRangesOwnShareInOrderThenStealsFromTheBack) {
  ThreadPool pool(2);
  constexpr int64_t kUnits = 64;
  std::atomic<bool> stolen{false};
  std::vector<int64_t> order1;  // the units thread 1 ran, in its order
  std::vector<int> hits(kUnits, 0);
  run_ranges(pool, kUnits, 2, [&](int64_t u0, int64_t u1, int t) {
    for (int64_t u = u0; u < u1; ++u) {
      if (t == 0 && u == 0) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!stolen.load() && std::chrono::steady_clock::now() < give_up)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (t == 1) {
        order1.push_back(u);
        if (u < kUnits / 2) stolen.store(true);
      }
      hits[size_t(u)]++;
    }
  });
  for (int64_t u = 0; u < kUnits; ++u) ASSERT_EQ(hits[size_t(u)], 1) << "unit " << u;
  ASSERT_TRUE(stolen.load()) << "the worker never took a unit of the caller's share";
  ASSERT_GE(order1.size(), size_t(kUnits / 2 + 1));
  for (int64_t i = 0; i < kUnits / 2; ++i)
    ASSERT_EQ(order1[size_t(i)], kUnits / 2 + i) << "the worker's own share, in order";
  // Then the caller's share from its back: chunks of 2 taken downwards, each run upwards.
  ASSERT_EQ(order1[size_t(kUnits / 2)], kUnits / 2 - 2);
  ASSERT_EQ(order1[size_t(kUnits / 2 + 1)], kUnits / 2 - 1);
}

}  // namespace
}  // namespace nanovllm::cpu
