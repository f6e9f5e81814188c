// Tensor-parallel Qwen3 and Qwen2 with one process per rank: `mpirun -np 2` and `-np 4`
// (oversubscribed) of mpi_tp_main on the tiny presets must reproduce TP = 1's logits and greedy
// tokens; a model whose heads do not divide ends every rank with the error naming the field.
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "model/model_fixture.h"

namespace {

std::pair<int, std::string> run(const std::string& args) {
#if defined(NANOVLLM_MPIRUN) && defined(NANOVLLM_MPI_TP_MAIN)
  std::string cmd = std::string("timeout 120 ") + NANOVLLM_MPIRUN + " " + args + " 2>&1";
  cmd.replace(cmd.find("MAIN"), 4, NANOVLLM_MPI_TP_MAIN);
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (pipe && (n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int st = pipe ? pclose(pipe) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
#else
  ADD_FAILURE() << "built without MPI: run scripts/install_deps.sh (libopenmpi-dev openmpi-bin) "
                   "and configure again";
  return {-1, ""};
#endif
}

TEST(MpiTensorParallel, TinyQwen3AndQwen2MatchOneRank) {
  for (std::string preset : {"tiny", "tiny-qwen2"}) {
    const std::string model = nanovllm::test::tiny_model(preset);
    for (int np : {2, 4}) {
      auto [status, out] = run("-np " + std::to_string(np) + " MAIN " + model + " 6");
      EXPECT_EQ(status, 0) << preset << " np " << np << ":\n" << out;
      EXPECT_NE(out.find("mpi tp=" + std::to_string(np) + ": tokens and logits match tp=1"), std::string::npos)
          << preset << " np " << np << ":\n" << out;
    }
  }
}

TEST(MpiTensorParallel, NonDividingHeadsEndEveryRank) {
  auto [status, out] = run("-np 3 MAIN " + nanovllm::test::tiny_model("tiny") + " 1");
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(status, 124) << "timed out:\n" << out;
  EXPECT_NE(out.find("num_attention_heads 4 is not divisible by tensor_parallel_size 3"), std::string::npos) << out;
}

}  // namespace
