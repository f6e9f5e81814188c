// ThreadPool under ThreadSanitizer (this file, thread_pool.cpp and check.cpp are built with
// -fsanitize=thread on their own; see CMakeLists.txt): thousands of run_shared, run_on_all and
// parallel_for dispatches back to back, with and without sleeping workers, on 2 to 4 threads.
// The units are plain ints written by whichever thread claims them, so a unit run twice, a call
// that outlives its dispatch or a missing happens-before is a TSan report or a failed count.
// (A worker reading a newer task under an older generation ran a run_on_all twice and
// deadlocked this test before the fix that keeps the task's kind in the generation.)
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

}  // namespace
}  // namespace nanovllm::cpu
