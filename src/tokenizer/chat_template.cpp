#include "tokenizer/chat_template.h"


#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_parser.h"
#include "util/check.h"
#include "util/file.h"

namespace nanovllm {

namespace jinja {
struct Program {
  Body body;
};
}  // namespace jinja

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {
  auto program = std::make_shared<jinja::Program>();
  program->body = jinja::parse_template(source_);
  jinja::check_names(program->body);
  program_ = std::move(program);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra_kwargs) const {
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object())
    fail("chat template: extra kwargs must be a JSON object, got {}", extra_kwargs.type_name());
  // As transformers: special tokens, then the caller's kwargs, then the conversation.
  std::vector<std::pair<std::string, jinja::Value>> vars = {
      {"bos_token", jinja::Value(bos_token_)},
      {"eos_token", jinja::Value(eos_token_)},
  };
  auto set = [&](const std::string& name, jinja::Value v) {
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  };
  if (extra_kwargs.is_object())
    for (auto it = extra_kwargs.begin(); it != extra_kwargs.end(); ++it) set(it.key(), jinja::from_json(it.value()));
  set("messages", jinja::from_json(messages));
  set("tools", jinja::from_json(tools));
  set("documents", jinja::Value(jinja::None{}));
  set("add_generation_prompt", jinja::Value(add_generation_prompt));
  return jinja::render(program_->body, std::move(vars), limits_);
}

namespace {

std::string special_token(const nlohmann::ordered_json& config, const char* key, const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  fail("{}: '{}' must be a string or an object with a string 'content'", path, key);
}

}  // namespace

ChatTemplate load_chat_template(const std::string& model_folder) {
  const std::string path = model_folder + "/tokenizer_config.json";
  const std::string text = read_file(path);
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
  if (!config.is_object()) fail("{}: expected a JSON object", path);
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) fail("{}: no 'chat_template'", path);
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    bool found = false;
    for (const auto& t : *it) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
        source = t["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) fail("{}: 'chat_template' lists no template named 'default'", path);
  } else {
    fail("{}: 'chat_template' must be a string or a list of named templates", path);
  }
  try {
    return ChatTemplate(std::move(source), special_token(config, "bos_token", path), special_token(config, "eos_token", path));
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

}  // namespace nanovllm
