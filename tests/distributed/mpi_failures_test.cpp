// MPI failure scenarios (mpi_failure_main.cpp under `mpirun -np 3`): a rank that throws inside a
// primitive, aborts, dies, or stalls. Each must end every rank with a clear message within
// seconds, never hang (each run is also bounded by coreutils `timeout 90`).
#include <chrono>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include <gtest/gtest.h>

namespace {

struct MpiRun {
  int status = -1;  // exit status of `timeout ... mpirun ...`
  std::string output;
  double seconds = 0;
};

MpiRun run_mpi(const std::string& mode, int np = 3) {
#if defined(NANOVLLM_MPIRUN) && defined(NANOVLLM_MPI_FAILURE_MAIN)
  std::string cmd = std::string("timeout 90 ") + NANOVLLM_MPIRUN + " -np " + std::to_string(np) + " " +
                    NANOVLLM_MPI_FAILURE_MAIN + " " + mode + " 2>&1";
  MpiRun run;
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  int st = pclose(pipe);
  run.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
#else
  ADD_FAILURE() << "built without MPI: run scripts/install_deps.sh (libopenmpi-dev openmpi-bin) "
                   "and configure again";
  return MpiRun{};
#endif
}

TEST(MpiFailures, HealthyRunExitsZero) {
  MpiRun r = run_mpi("ok");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("all 3 ranks finished"), std::string::npos) << r.output;
}

TEST(MpiFailures, ErrorInsideAPrimitiveEndsTheJob) {
  MpiRun r = run_mpi("throw");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "timed out:\n" << r.output;
  EXPECT_NE(r.output.find("mpi rank 1 aborted: scatter failed: scatter: recv f32[2] has 2 elements, expected 64"),
            std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 60) << r.output;
}

TEST(MpiFailures, RankThatAbortsEndsTheJobWithItsReason) {
  MpiRun r = run_mpi("abort");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "timed out:\n" << r.output;
  EXPECT_NE(r.output.find("mpi rank 1 aborted: cannot load weights: missing shard"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 60) << r.output;
}

TEST(MpiFailures, RankThatDiesEndsTheJob) {
  MpiRun r = run_mpi("die");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "timed out:\n" << r.output;
  EXPECT_NE(r.output.find("signal 9"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 60) << r.output;
}

TEST(MpiFailures, RankThatStallsIsEndedByTheWatchdog) {
  MpiRun r = run_mpi("stall");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "timed out:\n" << r.output;
  EXPECT_NE(r.output.find("waited 2.0 s in all_reduce for its peers; ending the job"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 60) << r.output;
}

}  // namespace
