// config.json's quantization_config as the Qwen team / AutoAWQ / AutoGPTQ write it, make-model's
// quantized folders (tensor names, shapes, dtypes), and model/quantized_checkpoint.h on
// hand-packed tensors: AWQ's nibble order (the word 0x75316420
// holds columns 0..7 = 0..7, as AutoAWQ packs it), GPTQ's packing along k (qweight) and n
// (qzeros) with the stored zero + 1, GPTQ 8-bit as signed int8, group_size -1, and fp8 blocks
// requantized to int8 groups of 128 (a partial last group included).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/hf_config.h"
#include "model/make_model.h"
#include "model/quantized_checkpoint.h"
#include "model/safetensors.h"
#include "runtime/fp8.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;

TensorToWrite words(const std::string& name, std::vector<int64_t> shape, const std::vector<uint32_t>& v) {
  TensorToWrite t{name, DType::I32, std::move(shape), std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

TensorToWrite halfs(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  TensorToWrite t{name, DType::F16, std::move(shape), std::vector<uint8_t>(v.size() * 2)};
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_f16(v[i]);
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
  }
  return t;
}

class QuantizedFormats : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nanovllm_quantized_formats_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A checkpoint folder holding exactly `tensors` (a new folder per call: an earlier
  // Checkpoint keeps its file mapped).
  Checkpoint checkpoint(const std::vector<TensorToWrite>& tensors) {
    const fs::path folder = dir_ / std::to_string(++made_);
    fs::create_directories(folder);
    write_safetensors((folder / "model.safetensors").string(), tensors);
    return Checkpoint(folder.string());
  }
  int made_ = 0;
  fs::path dir_;
};

TEST_F(QuantizedFormats, AwqNibbleOrder) {
  CheckpointQuantization q;
  q.method = CheckpointQuantMethod::Awq;
  q.bits = 4;
  q.group_size = 8;
  // [k = 8, n = 8]: every k row's word is 0x75316420, columns 0..7 hold 0..7; zeros all 1.
  const std::vector<float> scales = {0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4};
  const Checkpoint ckpt = checkpoint({words("m.qweight", {8, 1}, std::vector<uint32_t>(8, 0x75316420u)),
                                      words("m.qzeros", {1, 1}, {0x11111111u}),
                                      halfs("m.scales", {1, 8}, scales)});
  const QuantizedWeight w = read_quantized_linear(ckpt, q, "m", 8, 8);
  EXPECT_EQ(w.scheme.format, QuantFormat::Int4);
  EXPECT_EQ(w.scheme.group, 8);
  for (int64_t j = 0; j < 8; ++j) {
    EXPECT_EQ(w.zero[size_t(j)], 1.0f);
    EXPECT_EQ(w.scale[size_t(j)], scales[size_t(j)]);
    for (int64_t i = 0; i < 8; ++i) {
      EXPECT_EQ(w.q[size_t(j * 8 + i)], j) << "column " << j << " row " << i;
      EXPECT_FLOAT_EQ(w.dequantize(j, i), float(j - 1) * scales[size_t(j)]);
    }
  }
}

TEST_F(QuantizedFormats, Gptq4PacksAlongKAndStoresZeroMinusOne) {
  CheckpointQuantization q;
  q.method = CheckpointQuantMethod::Gptq;
  q.bits = 4;
  q.group_size = 8;
  // n = 8, k = 16 (two groups): qweight [2, 8], word (r, j) bits 4i hold row 8r + i.
  std::vector<uint32_t> qweight(16);
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 8; ++i) qweight[size_t(r * 8 + j)] |= uint32_t((8 * r + i + j) % 16) << (4 * i);
  // qzeros [2, 1]: column j of group g stores (j + g) % 8, the zero is one more.
  std::vector<uint32_t> qzeros(2);
  for (int g = 0; g < 2; ++g)
    for (int j = 0; j < 8; ++j) qzeros[size_t(g)] |= uint32_t((j + g) % 8) << (4 * j);
  std::vector<float> scales(16);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.25f * float(i + 1);
  std::vector<uint32_t> g_idx(16);
  for (uint32_t i = 0; i < 16; ++i) g_idx[i] = i / 8;
  const Checkpoint ckpt = checkpoint({words("m.qweight", {2, 8}, qweight), words("m.qzeros", {2, 1}, qzeros),
                                      halfs("m.scales", {2, 8}, scales), words("m.g_idx", {16}, g_idx)});
  const QuantizedWeight w = read_quantized_linear(ckpt, q, "m", 8, 16);
  EXPECT_EQ(w.scheme.format, QuantFormat::Int4);
  for (int64_t j = 0; j < 8; ++j) {
    for (int64_t g = 0; g < 2; ++g) {
      EXPECT_EQ(w.zero[size_t(j * 2 + g)], float((j + g) % 8 + 1));
      EXPECT_EQ(w.scale[size_t(j * 2 + g)], scales[size_t(g * 8 + j)]);
    }
    for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(w.q[size_t(j * 16 + i)], (i + j) % 16) << j << ", " << i;
  }
}

TEST_F(QuantizedFormats, Gptq8IsSignedAndGroupMinusOneIsOneGroup) {
  CheckpointQuantization q;
  q.method = CheckpointQuantMethod::Gptq;
  q.bits = 8;
  q.group_size = 0;  // -1 in config.json
  // n = 4, k = 8: qweight [2, 4], four codes per word; qzeros [1, 1] stores 127 for each column.
  std::vector<uint32_t> qweight(8);
  auto code = [](int64_t i, int64_t j) { return uint32_t((i * 37 + j * 61) % 256); };
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 4; ++j)
      for (int b = 0; b < 4; ++b) qweight[size_t(r * 4 + j)] |= code(4 * r + b, j) << (8 * b);
  const Checkpoint ckpt = checkpoint({words("m.qweight", {2, 4}, qweight), words("m.qzeros", {1, 1}, {0x7F7F7F7Fu}),
                                      halfs("m.scales", {1, 4}, {1, 2, 3, 4})});
  const QuantizedWeight w = read_quantized_linear(ckpt, q, "m", 4, 8);
  EXPECT_EQ(w.scheme.format, QuantFormat::Int8);
  EXPECT_EQ(w.scheme.group, 0);  // one group over all of k is int8's per-row form
  EXPECT_TRUE(w.zero.empty());
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(w.scale[size_t(j)], float(j + 1));
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(w.q[size_t(j * 8 + i)], int(code(i, j)) - 128) << j << ", " << i;
  }

  q.bits = 4;  // int4, group -1: the group is k
  const Checkpoint ckpt4 = checkpoint({words("m.qweight", {1, 8}, std::vector<uint32_t>(8, 0x76543210u)),
                                       words("m.qzeros", {1, 1}, {0x77777777u}),
                                       halfs("m.scales", {1, 8}, std::vector<float>(8, 0.5f))});
  const QuantizedWeight w4 = read_quantized_linear(ckpt4, q, "m", 8, 8);
  EXPECT_EQ(w4.scheme.group, 8);
  EXPECT_EQ(w4.zero[0], 8.0f);
  EXPECT_FLOAT_EQ(w4.dequantize(3, 5), (5.0f - 8.0f) * 0.5f);
}

// fp8 [2, 130] in blocks of 128: scale_inv [1, 2]; each row's groups of 128 and 2 requantized.
TEST_F(QuantizedFormats, Fp8BlocksRequantizeToInt8Groups) {
  CheckpointQuantization q;
  q.method = CheckpointQuantMethod::Fp8;
  q.bits = 8;
  q.block_n = q.block_k = 128;
  const int64_t n = 2, k = 130;
  TensorToWrite weight{"m.weight", DType::F8E4M3, {n, k}, std::vector<uint8_t>(size_t(n * k))};
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i)
      weight.bytes[size_t(j * k + i)] = float_to_fp8_e4m3(float((i * 7 + j * 3) % 41 - 20) * 0.37f);
  TensorToWrite scale{"m.weight_scale_inv", DType::F32, {1, 2}, std::vector<uint8_t>(8)};
  const float sinv[2] = {0.5f, 3.0f};
  std::memcpy(scale.bytes.data(), sinv, 8);
  const Checkpoint ckpt = checkpoint({weight, scale});
  const QuantizedWeight w = read_quantized_linear(ckpt, q, "m", n, k);
  EXPECT_EQ(w.scheme.format, QuantFormat::Int8);
  EXPECT_EQ(w.scheme.group, 128);
  ASSERT_EQ(w.scale.size(), size_t(n * 2));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < 2; ++g) {
      float amax = 0;
      for (int64_t i = g * 128; i < std::min(k, g * 128 + 128); ++i)
        amax = std::max(amax, std::fabs(fp8_e4m3_to_float(weight.bytes[size_t(j * k + i)]) * sinv[g]));
      EXPECT_FLOAT_EQ(w.scale[size_t(j * 2 + g)], amax / 127);
    }
    for (int64_t i = 0; i < k; ++i) {
      const float want = fp8_e4m3_to_float(weight.bytes[size_t(j * k + i)]) * sinv[i / 128];
      EXPECT_NEAR(w.dequantize(j, i), want, w.scale[size_t(j * 2 + i / 128)] / 2 + 1e-6f) << j << ", " << i;
    }
  }
}

ModelConfig parse_with(const std::string& quantization_config) {
  const std::string text = R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 32,
      "max_position_embeddings": 64, "quantization_config": )" + quantization_config + "}";
  return parse_model_config(text, "config.json");
}

TEST(QuantizationConfig, ParsesTheFormsCheckpointsUse) {
  EXPECT_FALSE(parse_with("null").quantization_config.enabled());
  const CheckpointQuantization fp8 = parse_with(
      R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})")
      .quantization_config;
  EXPECT_EQ(fp8.method, CheckpointQuantMethod::Fp8);
  EXPECT_EQ(fp8.block_n, 128);
  EXPECT_EQ(fp8.block_k, 128);
  const CheckpointQuantization awq = parse_with(
      R"({"bits": 4, "group_size": 128, "modules_to_not_convert": null, "quant_method": "awq",
          "version": "gemm", "zero_point": true})").quantization_config;
  EXPECT_EQ(awq.method, CheckpointQuantMethod::Awq);
  EXPECT_EQ(awq.group_size, 128);
  EXPECT_TRUE(awq.modules_to_not_convert.empty());
  // AutoAWQ's own spelling (quant_config.json copied into config.json).
  const CheckpointQuantization awq2 = parse_with(
      R"({"w_bit": 4, "q_group_size": 64, "quant_method": "awq", "version": "GEMM", "zero_point": true,
          "modules_to_not_convert": ["visual"]})").quantization_config;
  EXPECT_EQ(awq2.group_size, 64);
  EXPECT_TRUE(awq2.not_converted("model.visual.blocks.0"));
  EXPECT_FALSE(awq2.not_converted("model.layers.0.mlp.up_proj"));
  const CheckpointQuantization gptq = parse_with(
      R"({"bits": 8, "damp_percent": 0.01, "desc_act": false, "group_size": -1, "quant_method": "gptq",
          "sym": true, "true_sequential": true, "static_groups": false})").quantization_config;
  EXPECT_EQ(gptq.method, CheckpointQuantMethod::Gptq);
  EXPECT_EQ(gptq.bits, 8);
  EXPECT_EQ(gptq.group_size, 0);  // one group over all of k
  EXPECT_EQ(gptq.describe(), "gptq 8-bit, one group per row");
  try {
    parse_with(R"({"quant_method": "awq", "bits": 4, "group_size": -1})");
    ADD_FAILURE() << "awq group_size -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantization_config.group_size"), std::string::npos) << e.what();
  }
  try {
    parse_with("[1]");
    ADD_FAILURE() << "a list accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'quantization_config' must be an object"), std::string::npos) << e.what();
  }
}

// The layouts make-model writes: the linears' quantized tensors in place of their weight, every
// other tensor bf16 as before; modules_to_not_convert keeps its linears bf16.
TEST_F(QuantizedFormats, MakeModelWritesTheCheckpointLayouts) {
  struct Want {
    const char* format;
    std::vector<std::pair<std::string, std::vector<int64_t>>> o_proj;  // tiny o_proj [64, 128]
  };
  const std::vector<Want> wants = {
      {"fp8", {{".weight", {64, 128}}, {".weight_scale_inv", {1, 1}}}},
      {"awq", {{".qweight", {128, 8}}, {".qzeros", {4, 8}}, {".scales", {4, 64}}}},
      {"gptq4", {{".qweight", {16, 64}}, {".qzeros", {4, 8}}, {".scales", {4, 64}}, {".g_idx", {128}}}},
      {"gptq8", {{".qweight", {32, 64}}, {".qzeros", {4, 16}}, {".scales", {4, 64}}, {".g_idx", {128}}}},
  };
  for (const Want& want : wants) {
    MakeModelOptions o;
    o.preset = "tiny";
    o.out = (dir_ / want.format).string();
    o.quantization = want.format;
    o.group_size = 32;
    o.modules_to_not_convert = {"layers.1.mlp.down_proj"};
    make_model(o);
    const ModelConfig c = load_model_config(o.out);
    EXPECT_EQ(c.quantization_config.method_name(), std::string(want.format).substr(0, 4) == "gptq" ? "gptq" : want.format);
    const Checkpoint ckpt(o.out);
    const std::string m = "model.layers.0.self_attn.o_proj";
    for (const auto& [suffix, shape] : want.o_proj) {
      const SafetensorsTensor* t = ckpt.find(m + suffix);
      ASSERT_NE(t, nullptr) << want.format << " " << m + suffix;
      EXPECT_EQ(t->shape, shape) << want.format << " " << m + suffix;
    }
    if (std::string(want.format) != "fp8") {
      EXPECT_EQ(ckpt.find(m + ".weight"), nullptr) << want.format;
    }
    EXPECT_EQ(ckpt.find("model.layers.1.mlp.down_proj.weight")->dtype, DType::BF16) << want.format;
    EXPECT_EQ(ckpt.find("model.layers.1.mlp.down_proj.qweight"), nullptr) << want.format;
    EXPECT_EQ(ckpt.find("model.embed_tokens.weight")->dtype, DType::BF16) << want.format;
    EXPECT_TRUE(stored_quantized(ckpt, c.quantization_config, {m}));
    EXPECT_FALSE(stored_quantized(ckpt, c.quantization_config, {"model.layers.1.mlp.down_proj"}));
  }
}

// make-model --from: a bf16 folder re-written in each format holds exactly the tensors
// make-model writes for the same weights (its random ones, same seed), plus the folder's other
// files; and each misuse is an Error naming it.
TEST_F(QuantizedFormats, MakeModelFromAFolderWritesTheSameTensors) {
  MakeModelOptions bf16;
  bf16.preset = "tiny";
  bf16.seed = 3;
  bf16.out = (dir_ / "bf16").string();
  make_model(bf16);
  std::ofstream((dir_ / "bf16" / "notes.txt").string()) << "kept\n";
  for (const char* format : {"fp8", "awq", "gptq4", "gptq8"}) {
    MakeModelOptions direct = bf16;
    direct.out = (dir_ / (std::string("direct_") + format)).string();
    direct.quantization = format;
    direct.group_size = 32;
    direct.modules_to_not_convert = {"layers.1.mlp.down_proj"};
    make_model(direct);
    MakeModelOptions from;
    from.out = (dir_ / (std::string("from_") + format)).string();
    from.quantization = format;
    from.group_size = 32;
    from.modules_to_not_convert = direct.modules_to_not_convert;
    quantize_model_folder(bf16.out, from);
    const Checkpoint a(direct.out), b(from.out);
    ASSERT_EQ(a.names(), b.names()) << format;
    for (const std::string& name : a.names()) {
      const SafetensorsTensor *ta = a.find(name), *tb = b.find(name);
      EXPECT_EQ(ta->dtype, tb->dtype) << format << " " << name;
      EXPECT_EQ(ta->shape, tb->shape) << format << " " << name;
      EXPECT_TRUE(ta->nbytes == tb->nbytes && std::memcmp(ta->data, tb->data, ta->nbytes) == 0)
          << format << " " << name;
    }
    EXPECT_EQ(load_model_config(direct.out).quantization_config.method_name(),
              load_model_config(from.out).quantization_config.method_name());
    EXPECT_TRUE(fs::exists(fs::path(from.out) / "notes.txt")) << format;
    EXPECT_TRUE(fs::exists(fs::path(from.out) / "generation_config.json")) << format;
  }
  auto error_of = [&](const std::string& in, MakeModelOptions o) -> std::string {
    try {
      quantize_model_folder(in, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  MakeModelOptions o;
  o.out = (dir_ / "again").string();
  EXPECT_NE(error_of(bf16.out, o).find("give --quantization fp8, awq, gptq4 or gptq8"),
            std::string::npos);
  o.quantization = "fp8";
  EXPECT_NE(error_of((dir_ / "from_fp8").string(), o).find("quantized already"), std::string::npos);
  MakeModelOptions same = o;
  same.out = bf16.out;
  EXPECT_NE(error_of(bf16.out, same).find("--out must be another folder"), std::string::npos);
  MakeModelOptions shaped = o;
  shaped.layers = 3;
  EXPECT_NE(error_of(bf16.out, shaped).find("drop the shape"), std::string::npos);
}

}  // namespace
}  // namespace nanovllm
