#include "model/quantization_config.h"

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "util/json_brief.h"

namespace nanovllm {

// Named, not anonymous: the library builds in unity batches, where another file's helpers of the
// same names would collide.
namespace quant_config_detail {

using json = nlohmann::json;

// A field of quantization_config, nullptr when absent or null.
const json* qfield(const json& q, const char* name) {
  auto it = q.find(name);
  return it == q.end() || it->is_null() ? nullptr : &*it;
}

// The first of `names` present (aliases: AutoAWQ's w_bit / q_group_size), with the name found.
const json* qfield_any(const json& q, std::initializer_list<const char*> names, const char** found) {
  for (const char* n : names) {
    if (const json* v = qfield(q, n)) {
      *found = n;
      return v;
    }
  }
  *found = *names.begin();
  return nullptr;
}

int64_t qint(const json& v, const std::string& path, const std::string& name) {
  if (!v.is_number_integer())
    fail("{}: field 'quantization_config.{}' must be an integer, got {}", path, name, json_brief(v));
  return v.get<int64_t>();
}

bool qbool(const json& v, const std::string& path, const std::string& name) {
  if (!v.is_boolean())
    fail("{}: field 'quantization_config.{}' must be true or false, got {}", path, name, json_brief(v));
  return v.get<bool>();
}

std::string qstring(const json& v, const std::string& path, const std::string& name) {
  if (!v.is_string())
    fail("{}: field 'quantization_config.{}' must be a string, got {}", path, name, json_brief(v));
  return v.get<std::string>();
}

// A string field that must be one value when present.
void require_string(const json& q, const char* name, const std::string& want, const std::string& path,
                    const std::string& what) {
  const json* v = qfield(q, name);
  if (!v) return;
  const std::string s = qstring(*v, path, name);
  if (s != want)
    fail("{}: field 'quantization_config.{}' is '{}'; {} supports only '{}'", path, name, s, what, want);
}

void require_bool(const json& q, const char* name, bool want, const std::string& path,
                  const std::string& what) {
  const json* v = qfield(q, name);
  if (v && qbool(*v, path, name) != want)
    fail("{}: field 'quantization_config.{}' is {}; {} supports only {}", path, name, !want, what, want);
}

void append_modules(const json& q, const char* name, const std::string& path, std::vector<std::string>& out) {
  const json* v = qfield(q, name);
  if (!v) return;
  if (!v->is_array())
    fail("{}: field 'quantization_config.{}' must be a list of module names, got {}", path, name,
         json_brief(*v));
  for (const json& m : *v) {
    if (!m.is_string() || m.get_ref<const std::string&>().empty())
      fail("{}: field 'quantization_config.{}' holds {}, not a module name", path, name, json_brief(m));
    out.push_back(m.get<std::string>());
  }
}

// group_size: a positive multiple of 8 (the unpacked form's groups), or -1 where allowed.
int64_t group_size(const json& q, const std::string& path, bool allow_all) {
  const char* name = nullptr;
  const json* v = qfield_any(q, {"group_size", "q_group_size"}, &name);
  if (!v) fail("{}: missing field 'quantization_config.group_size'", path);
  const int64_t g = qint(*v, path, name);
  if (g == -1 && allow_all) return 0;
  if (g <= 0 || g % 8 != 0)
    fail("{}: field 'quantization_config.{}' is {}; supported: a positive multiple of 8{} (the "
         "checkpoints use 128)", path, name, g, allow_all ? " or -1" : "");
  return g;
}

CheckpointQuantization parse_fp8(const json& q, const std::string& path) {
  CheckpointQuantization c;
  c.method = CheckpointQuantMethod::Fp8;
  c.bits = 8;
  if (const json* v = qfield(q, "fmt")) {
    const std::string fmt = qstring(*v, path, "fmt");
    if (fmt != "e4m3")
      fail("{}: field 'quantization_config.fmt' is '{}'; fp8 supports only 'e4m3'", path, fmt);
  }
  require_string(q, "activation_scheme", "dynamic", path, "fp8");
  const json* b = qfield(q, "weight_block_size");
  if (!b)
    fail("{}: missing field 'quantization_config.weight_block_size': only block-wise fp8 "
         "([128, 128]) is supported", path);
  if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer())
    fail("{}: field 'quantization_config.weight_block_size' must be two integers, got {}", path,
         json_brief(*b));
  c.block_n = (*b)[0].get<int64_t>();
  c.block_k = (*b)[1].get<int64_t>();
  if (c.block_n != 128 || c.block_k != 128)
    fail("{}: field 'quantization_config.weight_block_size' is [{}, {}]; fp8 supports only "
         "[128, 128]", path, c.block_n, c.block_k);
  append_modules(q, "modules_to_not_convert", path, c.modules_to_not_convert);
  append_modules(q, "ignored_layers", path, c.modules_to_not_convert);
  return c;
}

CheckpointQuantization parse_awq(const json& q, const std::string& path) {
  CheckpointQuantization c;
  c.method = CheckpointQuantMethod::Awq;
  const char* name = nullptr;
  const json* bits = qfield_any(q, {"bits", "w_bit"}, &name);
  if (!bits) fail("{}: missing field 'quantization_config.bits'", path);
  const int64_t b = qint(*bits, path, name);
  if (b != 4) fail("{}: field 'quantization_config.{}' is {}; awq supports only 4", path, name, b);
  c.bits = 4;
  c.group_size = group_size(q, path, /*allow_all=*/false);
  if (const json* v = qfield(q, "version")) {
    const std::string version = qstring(*v, path, "version");
    if (version != "gemm" && version != "GEMM")
      fail("{}: field 'quantization_config.version' is '{}'; awq supports only 'gemm'", path, version);
  }
  require_bool(q, "zero_point", true, path, "awq");
  append_modules(q, "modules_to_not_convert", path, c.modules_to_not_convert);
  return c;
}

CheckpointQuantization parse_gptq(const json& q, const std::string& path) {
  CheckpointQuantization c;
  c.method = CheckpointQuantMethod::Gptq;
  const json* bits = qfield(q, "bits");
  if (!bits) fail("{}: missing field 'quantization_config.bits'", path);
  const int64_t b = qint(*bits, path, "bits");
  if (b != 4 && b != 8) fail("{}: field 'quantization_config.bits' is {}; gptq supports 4 and 8", path, b);
  c.bits = int(b);
  c.group_size = group_size(q, path, /*allow_all=*/true);
  require_bool(q, "desc_act", false, path, "gptq (act-order needs g_idx permutations)");
  require_bool(q, "sym", true, path, "gptq");
  require_string(q, "checkpoint_format", "gptq", path, "gptq");
  if (const json* d = qfield(q, "dynamic"); d && !(d->is_object() && d->empty()))
    fail("{}: field 'quantization_config.dynamic' (per-module overrides) is not supported", path);
  append_modules(q, "modules_to_not_convert", path, c.modules_to_not_convert);
  return c;
}

}  // namespace quant_config_detail

bool CheckpointQuantization::not_converted(const std::string& module) const {
  for (const std::string& m : modules_to_not_convert) {
    if (module.find(m) != std::string::npos) return true;
  }
  return false;
}

std::string CheckpointQuantization::method_name() const {
  switch (method) {
    case CheckpointQuantMethod::None: return "none";
    case CheckpointQuantMethod::Fp8: return "fp8";
    case CheckpointQuantMethod::Awq: return "awq";
    case CheckpointQuantMethod::Gptq: return "gptq";
  }
  return "?";
}

std::string CheckpointQuantization::describe() const {
  switch (method) {
    case CheckpointQuantMethod::None: return "none";
    case CheckpointQuantMethod::Fp8: return fmt::format("fp8 e4m3, blocks [{}, {}]", block_n, block_k);
    case CheckpointQuantMethod::Awq:
    case CheckpointQuantMethod::Gptq:
      return group_size ? fmt::format("{} {}-bit, group {}", method_name(), bits, group_size)
                        : fmt::format("{} {}-bit, one group per row", method_name(), bits);
  }
  return "?";
}

CheckpointQuantization parse_quantization_config(const nlohmann::json& q, const std::string& path) {
  using namespace quant_config_detail;
  if (!q.is_object())
    fail("{}: field 'quantization_config' must be an object, got {}", path, json_brief(q));
  const json* m = qfield(q, "quant_method");
  if (!m) fail("{}: missing field 'quantization_config.quant_method' (supported: fp8, awq, gptq)", path);
  const std::string method = qstring(*m, path, "quant_method");
  if (method == "fp8") return parse_fp8(q, path);
  if (method == "awq") return parse_awq(q, path);
  if (method == "gptq") return parse_gptq(q, path);
  fail("{}: field 'quantization_config.quant_method' is '{}'; supported: fp8, awq, gptq", path, method);
}

}  // namespace nanovllm
