// What a mixture-of-experts folder adds, through the whole engine (the shared paths -- logits and
// greedy ids against the reference forward, prefix cache, preemption, chunked prefill, TP,
// quantization at load -- run the qwen3-moe-tiny and tiny-mixtral presets in their own suites):
// a config whose expert counts or sizes do not match the checkpoint's tensors is an Error naming
// the tensor and both shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "model/model_fixture.h"
#include "reference/test_util.h"
#include "util/check.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

void expect_load_error(const std::string& model, const std::vector<std::string>& parts) {
  try {
    LLMEngine engine(test::tiny_config(model));
    ADD_FAILURE() << model << " loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " not in: " << msg;
  }
}

TEST(MoeModel, ExpertCountsThatDoNotMatchTheTensorsNameTheTensor) {
  const std::string q = test::tiny_model("qwen3-moe-tiny");  // 16 experts of 32
  expect_load_error(test::with_config_field(q, "num_experts", 12, "e12"),
                    {"'model.layers.0.mlp.gate.weight' has shape [16, 64], expected [12, 64]"});
  expect_load_error(test::with_config_field(q, "num_experts", 20, "e20"),
                    {"'model.layers.0.mlp.gate.weight' has shape [16, 64], expected [20, 64]"});
  expect_load_error(test::with_config_field(q, "moe_intermediate_size", 48, "i48"),
                    {"'model.layers.0.mlp.experts.0.gate_proj.weight' has shape [32, 64], expected [48, 64]"});
  // Layer 1 is dense in the checkpoint: a config that calls it sparse finds no router.
  expect_load_error(test::with_config_field(q, "mlp_only_layers", nlohmann::json::array(), "all-sparse"),
                    {"model.layers.1.mlp.gate.weight"});
  const std::string m = test::tiny_model("tiny-mixtral");  // 8 experts
  expect_load_error(test::with_config_field(m, "num_local_experts", 4, "e4"),
                    {"'model.layers.0.block_sparse_moe.gate.weight' has shape [8, 64], expected [4, 64]"});
}

}  // namespace
}  // namespace nanovllm
