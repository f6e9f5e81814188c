#pragma once
// Chat templates: renders the Jinja `chat_template` of a Hugging Face tokenizer_config.json
// byte for byte as transformers' apply_chat_template(..., tokenize=False) does (jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls; `tojson` is
// json.dumps(x, ensure_ascii=False); raise_exception and strftime_now are globals).
//
// The interpreter (src/tokenizer/jinja_*) covers the Jinja subset chat templates use; syntax
// outside it is rejected when the template is constructed, with the template line.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/render_limits.h"

namespace nanovllm {

namespace jinja {
struct Program;
}

class ChatTemplate {
 public:
  // Parses `source`. Error ("chat template line N: ...") on syntax errors and on syntax,
  // filters or tests the interpreter does not support.
  // Copies share the parsed (immutable) template.
  ChatTemplate(std::string source, std::string bos_token = "", std::string eos_token = "");

  // Renders the conversation. The template sees `messages`, `tools` (none when null),
  // `add_generation_prompt`, `bos_token`, `eos_token` and every key of `extra_kwargs` (an
  // object or null, e.g. {"enable_thinking": false}); extra_kwargs may override bos/eos.
  // Python dicts keep insertion order and `tojson` prints keys in that order: pass
  // nlohmann::ordered_json to keep the caller's key order (nlohmann::json converts implicitly,
  // with its keys sorted).
  // Errors: the template's raise_exception(msg) throws Error(msg) unchanged; other runtime
  // errors (undefined attribute of an undefined value, type errors, ...) throw
  // Error("chat template line N: ...").
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& extra_kwargs) const;

  // Bounds on each render (render_limits.h); the defaults suit every real chat template.
  void set_limits(const RenderLimits& limits) { limits_ = limits; }
  const RenderLimits& limits() const { return limits_; }

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::string source_, bos_token_, eos_token_;
  RenderLimits limits_;
  std::shared_ptr<const jinja::Program> program_;
};

// Reads <model_folder>/tokenizer_config.json: `chat_template` (a string, or a list of
// {"name", "template"} objects of which "default" is used) and bos_token/eos_token (a string,
// an {"content": ...} object, or absent/null). Error naming the file when it is missing,
// malformed or has no chat template.
ChatTemplate load_chat_template(const std::string& model_folder);

}  // namespace nanovllm
