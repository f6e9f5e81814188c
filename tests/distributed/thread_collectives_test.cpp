// Every primitive of the threads communicator at world sizes 1-4 against a plain computation
// (tests/distributed/collective_checks.h), and a rank that fails, leaves, stalls or calls the
// wrong primitive: each a clear Error on every rank, never a hang.
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "distributed/collective_checks.h"
#include "distributed/thread_communicator.h"

namespace nanovllm {
namespace {

// Runs body(comm) on `p` rank threads; returns each rank's error text ("" when it returned).
std::vector<std::string> run_ranks(int p, double timeout_s, const std::function<void(Communicator&)>& body) {
  auto group = make_thread_group(p, timeout_s);
  std::vector<std::string> errors(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = make_thread_communicator(group, r);
        body(*comm);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        if (errors[size_t(r)].empty()) errors[size_t(r)] = "(empty error)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(ThreadCollectives, EveryPrimitiveMatchesPlainComputation) {
  for (int p = 1; p <= 4; ++p) {
    std::mutex mu;
    std::vector<std::string> failures;
    auto errors = run_ranks(p, 60, [&](Communicator& c) {
      auto f = test::CollectiveChecks(c).run_all();
      std::lock_guard lock(mu);
      failures.insert(failures.end(), f.begin(), f.end());
    });
    for (int r = 0; r < p; ++r) EXPECT_EQ(errors[size_t(r)], "") << "world " << p << " rank " << r;
    EXPECT_TRUE(failures.empty()) << "world " << p << ": " << failures.size() << " failures, first: "
                                  << (failures.empty() ? "" : failures[0]);
  }
}

TEST(ThreadCollectives, AllRanksHoldBitIdenticalAllReduce) {
  // bf16 and fractional f32: every rank must end with the same bits (each chunk is reduced once
  // and copied), which tensor-parallel ranks rely on to take identical decisions.
  const int p = 3;
  const int64_t n = 1001;
  std::vector<std::vector<uint16_t>> out(p);
  auto errors = run_ranks(p, 60, [&](Communicator& c) {
    std::vector<uint16_t> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = f32_to_bf16(0.013f * float(i * (c.rank() + 1) % 97));
    c.all_reduce(Tensor::contiguous(x.data(), DType::BF16, {n}));
    out[size_t(c.rank())] = x;
  });
  for (auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
}

TEST(ThreadFailures, RankThatThrowsFailsEveryRank) {
  auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, 30, [](Communicator& c) {
    float x[8] = {};
    auto t = Tensor::contiguous(x, DType::F32, {8});
    c.all_reduce(t);
    if (c.rank() == 1) throw Error("shard model-00002.safetensors is corrupt");
    for (int i = 0; i < 5; ++i) c.all_reduce(t);
  });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 10.0) << "peers should learn of the failure at once, not at the timeout";
  EXPECT_NE(errors[1].find("corrupt"), std::string::npos) << errors[1];
  for (int r : {0, 2}) {
    EXPECT_NE(errors[size_t(r)].find("rank 1 left the group"), std::string::npos) << errors[size_t(r)];
  }
}

TEST(ThreadFailures, RankThatAbortsNamesItsReason) {
  auto errors = run_ranks(4, 30, [](Communicator& c) {
    int32_t v = c.rank();
    auto t = Tensor::contiguous(&v, DType::I32, {1});
    c.barrier();
    if (c.rank() == 2) {
      c.abort("cannot load weights: missing shard");
      throw Error("rank 2 gave up");
    }
    c.all_reduce(t);
  });
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[size_t(r)].find("rank 2 aborted: cannot load weights: missing shard"), std::string::npos)
        << errors[size_t(r)];
  }
  EXPECT_EQ(errors[2], "rank 2 gave up");
}

TEST(ThreadFailures, RankThatStallsIsReportedAtTheTimeout) {
  std::atomic<bool> release{false};
  auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, 1.5, [&](Communicator& c) {
    if (c.rank() == 2) {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;  // never calls barrier; its communicator then leaves
    }
    try {
      c.barrier();
    } catch (...) {
      release = true;
      throw;
    }
  });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 10.0);
  for (int r : {0, 1}) {
    EXPECT_NE(errors[size_t(r)].find("in barrier for ranks 2 that never came"), std::string::npos)
        << errors[size_t(r)];
  }
  EXPECT_EQ(errors[2], "");
}

TEST(ThreadFailures, MismatchedPrimitivesAreAnErrorOnEveryRank) {
  auto errors = run_ranks(2, 30, [](Communicator& c) {
    float x[4] = {};
    auto t = Tensor::contiguous(x, DType::F32, {4});
    if (c.rank() == 0) c.all_reduce(t); else c.broadcast(t, 0);
  });
  for (auto& e : errors) EXPECT_NE(e.find("called"), std::string::npos) << e;
}

TEST(ThreadFailures, BadArgumentsNameThePrimitiveAndFailThePeers) {
  auto errors = run_ranks(2, 30, [](Communicator& c) {
    float x[6] = {};
    float y[3] = {};
    // rank 1 gives 2 counts for a world of 2 but a recv of the wrong size.
    std::vector<int64_t> counts = {3, 3};
    auto recv = Tensor::contiguous(y, DType::F32, {c.rank() == 1 ? 2 : 3});
    c.scatter(Tensor::contiguous(x, DType::F32, {6}), recv, 0, counts);
  });
  EXPECT_NE(errors[1].find("scatter: recv f32[2] has 2 elements, expected 3"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("rank 1 failed in scatter"), std::string::npos) << errors[0];
  EXPECT_THROW(make_thread_group(0), Error);
  auto g = make_thread_group(2);
  auto c0 = make_thread_communicator(g, 0);
  EXPECT_THROW(make_thread_communicator(g, 0), Error);
  EXPECT_THROW(make_thread_communicator(g, 2), Error);
  int16_t h = 0;
  EXPECT_THROW(c0->all_reduce(Tensor::contiguous(&h, DType::F16, {1})), Error);
}

}  // namespace
}  // namespace nanovllm
