// Tensor parallelism on CUDA ranks (label cuda: needs a GPU). NCCL at world size 1 on the
// backend's stream, set as the engine's communicator: every all-reduce runs through NCCL, and
// greedy outputs equal those without a communicator. With two or more GPUs: TP = 2 (a rank per
// GPU, threads + NCCL) equals TP = 1, prefix cache included.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <random>

#include "distributed/nccl_communicator.h"
#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "nanovllm/llm.h"

namespace nanovllm {
namespace {

using Prompts = std::vector<std::vector<int32_t>>;

Prompts prompts_for(int vocab) {
  std::mt19937 rng(21);
  Prompts prompts;
  const int lens[] = {5, 17, 40, 33, 9};
  for (int len : lens) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
    prompts.push_back(p);
  }
  prompts.push_back(prompts[2]);  // a prefix-cache hit
  return prompts;
}

Prompts greedy_ids(LLM& llm, const Prompts& prompts) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  Prompts out;
  for (const GenerationOutput& o : llm.generate(prompts, {sp})) {
    EXPECT_EQ(o.finish_reason, "length") << o.error;
    out.push_back(o.token_ids);
  }
  return out;
}

Config cuda_config(const std::string& model) {
  Config c = test::tiny_config(model);
  c.device = "cuda";
  c.enforce_eager = true;  // NCCL is not captured into graphs
  return c;
}

TEST(CudaTensorParallel, NcclWorldOneEqualsNoCommunicator) {
  ASSERT_TRUE(nccl_built()) << "built without NCCL: install it with the CUDA toolkit and configure again";
  const std::string model = test::tiny_model("tiny");
  LLM llm(cuda_config(model));
  const Prompts prompts = prompts_for(test::vocab_size(model));
  const Prompts plain = greedy_ids(llm, prompts);
  Backend& backend = llm.engine().backend();
  auto nccl = make_nccl_communicator(nullptr, backend.device_index(), backend.native_stream());
  ASSERT_EQ(nccl->world_size(), 1);
  backend.set_communicator(nccl.get());
  const Prompts with_nccl = greedy_ids(llm, prompts);
  backend.set_communicator(nullptr);
  EXPECT_EQ(with_nccl, plain);
}

TEST(CudaTensorParallel, TwoGpusEqualOne) {
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << gpus;
  for (std::string preset : {"tiny", "tiny-qwen2"}) {
    const std::string model = test::tiny_model(preset);
    const Prompts prompts = prompts_for(test::vocab_size(model));
    Config one = cuda_config(model), two = cuda_config(model);
    two.tensor_parallel_size = 2;
    LLM a(one), b(two);
    EXPECT_EQ(greedy_ids(b, prompts), greedy_ids(a, prompts)) << preset;
  }
}

}  // namespace
}  // namespace nanovllm
