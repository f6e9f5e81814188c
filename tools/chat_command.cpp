// nanovllm chat: the model's chat template applied to messages; streams the reply. Interactive
// (a REPL) unless --message, --messages or --print-prompt make it one shot.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "nanovllm/llm.h"
#include "tokenizer/chat_template.h"
#include "tools/cli_options.h"
#include "tools/commands.h"
#include "util/check.h"
#include "util/file.h"

namespace nanovllm::cli {

namespace {

nlohmann::ordered_json read_json_file(const std::string& path, const char* what) {
  try {
    return nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{} {}: not valid JSON: {}", what, path, e.what());
  }
}

// Streams one reply to stdout and returns it.
GenerationOutput reply(LLM& llm, const nlohmann::ordered_json& messages, const SamplingParams& sp,
                       const ChatOptions& options) {
  GenerationOutput out = llm.chat(messages, sp, options, [](size_t, const std::string& delta) {
    std::fwrite(delta.data(), 1, delta.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  if (out.finish_reason == "error") fail("chat: {}", out.error);
  return out;
}

}  // namespace

void add_chat(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("chat", "chat with the model (streams tokens as they come)");
  struct Args {
    Config config;
    std::string message, messages_file, tools_file, enable_thinking, system;
    bool no_generation_prompt = false, print_prompt = false;
    SamplingParams params;
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  a->params.max_tokens = 512;
  add_engine_flags(*cmd, a->config);
  cmd->add_option("--message", a->message, "one user message: answer it and exit");
  cmd->add_option("--messages", a->messages_file, "a JSON file with the conversation so far");
  cmd->add_option("--tools", a->tools_file, "a JSON file with tool definitions");
  cmd->add_option("--system", a->system, "a system message to start with");
  cmd->add_flag("--no-generation-prompt", a->no_generation_prompt, "render without the assistant prompt");
  cmd->add_option("--enable-thinking", a->enable_thinking, "true or false (unset: the template's default)")
      ->check(CLI::IsMember({"true", "false"}));
  cmd->add_flag("--print-prompt", a->print_prompt, "print the rendered prompt and exit");
  add_sampling_flags(*cmd, a->params);
  cmd->add_option("--max-tokens", a->params.max_tokens, "tokens per reply at most");
  auto* seed = cmd->add_option("--seed", a->seed, "sampling seed: the same seed gives the same replies")
                   ->default_str("none: every run differs");
  on_run(cmd, commands, [a, seed] {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!a->messages_file.empty()) messages = read_json_file(a->messages_file, "--messages");
    if (!messages.is_array()) fail("--messages {}: expected a JSON array of messages", a->messages_file);
    if (!a->system.empty()) messages.insert(messages.begin(), {{"role", "system"}, {"content", a->system}});
    if (!a->message.empty()) messages.push_back({{"role", "user"}, {"content", a->message}});
    ChatOptions options;
    if (!a->tools_file.empty()) options.tools = read_json_file(a->tools_file, "--tools");
    options.add_generation_prompt = !a->no_generation_prompt;
    if (!a->enable_thinking.empty()) options.template_kwargs["enable_thinking"] = a->enable_thinking == "true";

    if (a->print_prompt) {  // no weights needed
      ChatTemplate tmpl = load_chat_template(a->config.model);
      std::string prompt = tmpl.render(messages, options.tools, options.add_generation_prompt,
                                       options.template_kwargs);
      std::fwrite(prompt.data(), 1, prompt.size(), stdout);
      return 0;
    }
    if (seed->count()) a->params.seed = a->seed;
    a->config.show_progress = false;
    LLM llm(a->config);
    if (!a->message.empty() || !a->messages_file.empty()) {
      reply(llm, messages, a->params, options);
      return 0;
    }
    // The REPL: one user message per line; /reset forgets the conversation, /exit or EOF ends.
    const bool tty = isatty(STDIN_FILENO);
    std::string line;
    bool failed = false;  // a failed turn: reported at once; the REPL goes on; exit status 1
    for (;;) {
      if (tty) std::fputs("> ", stdout), std::fflush(stdout);
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line == "/reset") {
        messages = nlohmann::ordered_json::array();
        continue;
      }
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      try {
        GenerationOutput out = reply(llm, messages, a->params, options);
        messages.push_back({{"role", "assistant"}, {"content", out.text}});
      } catch (const Error& e) {
        messages.erase(messages.end() - 1);  // the engine keeps going; drop the failed turn
        std::fprintf(stderr, "error: %s\n", e.what());
        failed = true;
      }
    }
    return failed ? 1 : 0;
  });
}

}  // namespace nanovllm::cli
