// make-model --from (make_model.h): a bf16 folder re-written with its decoder linears as a
// downloaded quantized checkpoint stores them.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "model/checkpoint_quantizer.h"
#include "model/hf_config.h"
#include "model/make_model.h"
#include "model/safetensors.h"
#include "runtime/tensor.h"
#include "util/check.h"

namespace nanovllm {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

void quantize_model_folder(const std::string& from, const MakeModelOptions& o) {
  const CheckpointQuantizer quantizer(o.quantization, o.group_size);
  if (!quantizer.enabled())
    fail("make-model --from: give --quantization fp8, awq, gptq4 or gptq8 (got '{}')",
         o.quantization);
  if (o.out.empty()) fail("make-model: no output folder given");
  if (o.layers || o.hidden || o.heads || o.kv_heads || o.head_dim || o.intermediate || o.vocab ||
      o.qkv_bias || o.tie_embeddings || !o.architecture.empty() || !o.tokenizer.empty() ||
      o.shards != 1)
    fail(
        "make-model --from {}: the folder's shapes, tokenizer and files are kept; drop the "
        "shape, architecture, tokenizer and shard options",
        from);
  std::error_code ec;
  if (fs::exists(o.out) && fs::equivalent(from, o.out, ec))
    fail("make-model --from {}: --out must be another folder", from);

  const fs::path in(from), out(o.out);
  const std::string in_config = (in / "config.json").string();
  std::ifstream f(in_config, std::ios::binary);
  if (!f) fail("{}: cannot read", in_config);
  std::stringstream text;
  text << f.rdbuf();
  ojson config;
  try {
    config = ojson::parse(text.str());
  } catch (const std::exception& e) {
    fail("{}: not JSON: {}", in_config, e.what());
  }
  if (!config.is_object()) fail("{}: not a JSON object", in_config);
  if (config.contains("quantization_config") && !config["quantization_config"].is_null())
    fail("{}: the folder is quantized already (quantization_config); --from needs bf16 weights",
         in_config);
  // quantization_config after num_key_value_heads, where transformers' sorted keys put it.
  ojson with = ojson::object();
  for (auto& [key, value] : config.items()) {
    with[key] = value;
    if (key == "num_key_value_heads")
      with["quantization_config"] = quantizer.config_json(o.modules_to_not_convert);
  }
  if (!with.contains("quantization_config"))
    with["quantization_config"] = quantizer.config_json(o.modules_to_not_convert);
  const std::string out_config = (out / "config.json").string();
  parse_model_config(with.dump(), out_config);  // the engine's own check, before writing

  const Checkpoint ckpt(from);
  std::vector<std::string> names = ckpt.names();
  std::vector<TensorSpec> specs;
  std::vector<bool> quantized;
  for (const std::string& name : names) {
    const SafetensorsTensor* t = ckpt.find(name);
    const bool linear = name.size() > 12 && name.compare(name.size() - 12, 12, "_proj.weight") == 0;
    const std::string module = name.substr(0, name.size() - 7);  // less ".weight"
    bool skip = !linear;
    for (const std::string& m : o.modules_to_not_convert)
      skip |= module.find(m) != std::string::npos;
    if (!skip && (t->dtype != DType::BF16 || t->shape.size() != 2))
      fail("{}: tensor '{}' is {} of {} dimensions; --from quantizes 2-d bf16 linears",
           ckpt.file_of(name), name, dtype_name(t->dtype), t->shape.size());
    quantized.push_back(!skip);
    if (skip) {
      specs.push_back({name, t->dtype, t->shape});
      continue;
    }
    quantizer.check_shape(name, t->shape[0], t->shape[1]);
    for (TensorSpec& s : quantizer.specs(name, t->shape[0], t->shape[1]))
      specs.push_back(std::move(s));
  }

  fs::create_directories(out, ec);
  if (ec) fail("{}: cannot create folder: {}", o.out, ec.message());
  for (const auto& e : fs::directory_iterator(in)) {  // tokenizer, generation config, ...
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || n == "config.json" || n == "model.safetensors.index.json" ||
        (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0))
      continue;
    fs::copy_file(e.path(), out / n, fs::copy_options::overwrite_existing, ec);
    if (ec) fail("make-model: cannot copy {} to {}: {}", e.path().string(), o.out, ec.message());
  }
  for (const auto& e : fs::directory_iterator(out)) {  // a stale index or shard would win on load
    const std::string n = e.path().filename().string();
    if (n == "model.safetensors.index.json" ||
        (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0))
      fs::remove(e.path());
  }
  {
    std::ofstream c(out_config, std::ios::binary | std::ios::trunc);
    c << with.dump(2) << "\n";
    if (!c) fail("{}: cannot write", out_config);
  }
  SafetensorsWriter writer((out / "model.safetensors").string(), std::move(specs),
                           {{"format", "pt"}});
  std::vector<uint16_t> w;
  for (size_t i = 0; i < names.size(); ++i) {
    const SafetensorsTensor* t = ckpt.find(names[i]);
    if (!quantized[i]) {
      writer.write(t->data, t->nbytes);
      continue;
    }
    w.resize(size_t(t->numel()));
    std::memcpy(w.data(), t->data, t->nbytes);
    for (const auto& bytes : quantizer.encode(w.data(), t->shape[0], t->shape[1]))
      writer.write(bytes.data(), bytes.size());
  }
  writer.finish();
}

}  // namespace nanovllm
