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

// A copy of `model` whose config.json has `field` = `value` (weights linked, not copied).
std::string with_config(const std::string& model, const std::string& field, const nlohmann::json& value) {
  const fs::path dir = model + "-" + field + "-" + value.dump();
  fs::create_directories(dir);
  test::remove_at_exit(dir);
  for (const auto& e : fs::directory_iterator(model)) {
    const fs::path to = dir / e.path().filename();
    if (e.path().filename() != "config.json" && !fs::exists(to)) fs::create_symlink(e.path(), to);
  }
  std::ifstream in(fs::path(model) / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config[field] = value;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

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
  expect_load_error(with_config(q, "num_experts", 12),
                    {"'model.layers.0.mlp.gate.weight' has shape [16, 64], expected [12, 64]"});
  expect_load_error(with_config(q, "num_experts", 20),
                    {"'model.layers.0.mlp.gate.weight' has shape [16, 64], expected [20, 64]"});
  expect_load_error(with_config(q, "moe_intermediate_size", 48),
                    {"'model.layers.0.mlp.experts.0.gate_proj.weight' has shape [32, 64], expected [48, 64]"});
  // Layer 1 is dense in the checkpoint: a config that calls it sparse finds no router.
  expect_load_error(with_config(q, "mlp_only_layers", nlohmann::json::array()),
                    {"model.layers.1.mlp.gate.weight"});
  const std::string m = test::tiny_model("tiny-mixtral");  // 8 experts
  expect_load_error(with_config(m, "num_local_experts", 4),
                    {"'model.layers.0.block_sparse_moe.gate.weight' has shape [8, 64], expected [4, 64]"});
}

}  // namespace
}  // namespace nanovllm
