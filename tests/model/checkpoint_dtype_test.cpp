// Checkpoints stored as f32 or f16 load as well as bf16 ones: the same model in f32 (exact) gives
// the same greedy tokens; in f16 (bf16 values rounded to f16) the logits stay close.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "model/safetensors.h"
#include "nanovllm/llm.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

// A copy of `model` with every tensor converted to `dtype`.
std::string convert(const std::string& model, DType dtype) {
  fs::path dir = model + "-" + dtype_name(dtype);
  test::remove_at_exit(dir);
  fs::create_directories(dir);
  fs::copy_file(fs::path(model) / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  Checkpoint ckpt(model);
  std::vector<TensorToWrite> out;
  for (const std::string& name : ckpt.names()) {
    const SafetensorsTensor* t = ckpt.find(name);
    TensorToWrite w{name, dtype, t->shape, {}};
    const size_t n = size_t(t->numel());
    w.bytes.resize(n * dtype_size(dtype));
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      float f = bf16_to_f32(h);
      if (dtype == DType::F32) {
        std::memcpy(w.bytes.data() + 4 * i, &f, 4);
      } else {
        uint16_t g = f32_to_f16(f);
        std::memcpy(w.bytes.data() + 2 * i, &g, 2);
      }
    }
    out.push_back(std::move(w));
  }
  write_safetensors((dir / "model.safetensors").string(), out);
  return dir.string();
}

std::vector<float> last_logits(const std::string& model, const std::vector<int32_t>& prompt) {
  LLMEngine engine(test::tiny_config(model));
  return test::prefill_logits(engine, prompt);
}

TEST(CheckpointDtypes, F32AndF16LoadLikeBf16) {
  const std::string model = test::tiny_model("tiny-qwen2");
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 250};
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  auto want = LLM(test::tiny_config(model)).generate({prompt}, {sp})[0].token_ids;
  const std::string f32 = convert(model, DType::F32);
  EXPECT_EQ(LLM(test::tiny_config(f32)).generate({prompt}, {sp})[0].token_ids, want);
  EXPECT_EQ(last_logits(f32, prompt), last_logits(model, prompt));  // bf16 -> f32 -> bf16 is exact

  const std::string f16 = convert(model, DType::F16);
  EXPECT_LT(test::relative_error(last_logits(f16, prompt), last_logits(model, prompt)), 1e-2);
}

}  // namespace
}  // namespace nanovllm
