// The tensor-parallel engine with one process per rank: `mpirun -np 2 nanovllm generate ...
// --distributed-backend mpi` prints exactly what one process prints (rank 0 prints, the other
// rank serves it and exits 0), prefix-cache hits and preemption included; a model whose heads do
// not divide, and a corrupt checkpoint, end every process with the error and a non-zero status.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "model/model_fixture.h"
#include "reference/test_util.h"

namespace nanovllm {
namespace {

std::pair<int, std::string> shell(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (pipe && (n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int st = pipe ? pclose(pipe) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// `nanovllm generate` with `args`, alone or under mpirun -np `np` (stdout only, or both).
std::pair<int, std::string> generate(int np, const std::string& args, bool with_stderr = false) {
  const std::string cli = test::binary_dir() + "/nanovllm generate " + args +
                          (with_stderr ? " 2>&1" : " 2>/dev/null");
  if (np == 0) return shell("timeout 120 " + cli);
#if defined(NANOVLLM_MPIRUN)
  return shell("timeout 120 " + std::string(NANOVLLM_MPIRUN) + " -np " + std::to_string(np) + " " +
               cli + " --distributed-backend mpi");
#else
  ADD_FAILURE() << "built without MPI: run scripts/install_deps.sh (libopenmpi-dev openmpi-bin) "
                   "and configure again";
  return {-1, ""};
#endif
}

// Six prompts sharing a 20-token prefix, greedy, 16 tokens each.
std::string prompt_args(const std::string& model) {
  std::string args = "--model " + model + " --threads 1 --temperature 0 --ignore-eos --max-tokens 16 --json";
  std::string shared;
  for (int i = 0; i < 20; ++i) shared += std::to_string((i * 37 + 11) % 380) + ",";
  for (int p = 0; p < 6; ++p) {
    std::string tail;
    for (int i = 0; i <= 3 * p; ++i) {
      if (i > 0) tail += ",";
      tail += std::to_string((p * 101 + i * 13 + 7) % 380);
    }
    args += " --prompt-ids " + shared + tail;
  }
  return args;
}

TEST(MpiEngine, TwoProcessesPrintWhatOneProcessPrints) {
  for (std::string preset : {"tiny", "tiny-qwen2"}) {
    const std::string model = test::tiny_model(preset);
    // 1 MiB of KV cache; then 8 blocks of 16 tokens for six ~40-token sequences: preemption.
    const int64_t block = test::kv_block_bytes(model, 16);
    for (const std::string& kv : {std::string("1M"), std::to_string(8 * block)}) {
      const std::string args = prompt_args(model) + " --block-size 16 --max-model-len 64 --kv-cache-memory " + kv;
      const auto [one_status, one] = generate(0, args);
      ASSERT_EQ(one_status, 0) << one;
      ASSERT_NE(one.find("token_ids"), std::string::npos) << one;
      const auto [two_status, two] = generate(2, args + " --tensor-parallel-size 2");
      EXPECT_EQ(two_status, 0) << preset << " kv " << kv << ":\n" << two;
      EXPECT_EQ(two, one) << preset << " kv " << kv;
    }
  }
}

TEST(MpiEngine, ShapesThatDoNotDivideEndEveryProcess) {
  const std::string model = test::tiny_model("tiny");
  const auto [status, out] = generate(3, prompt_args(model), /*with_stderr=*/true);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("num_attention_heads"), std::string::npos) << out;
}

TEST(MpiEngine, ACorruptCheckpointEndsEveryProcess) {
  const std::string dir = test::truncated_checkpoint(test::tiny_model("tiny"), "mpi-corrupt");
  const auto [status, out] = generate(2, prompt_args(dir), /*with_stderr=*/true);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("model.safetensors"), std::string::npos) << out;
}

}  // namespace
}  // namespace nanovllm
