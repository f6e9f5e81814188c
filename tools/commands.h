#pragma once
// CLI subcommands. Each add_* registers its flags and sets commands.run to its action.
#include <functional>

#include <CLI/CLI.hpp>

#include "nanovllm/config.h"

namespace nanovllm::cli {

struct Commands {
  std::function<int()> run = [] { return 0; };
};

// Makes `action` the command's action when the subcommand `cmd` is the one given.
inline void on_run(CLI::App* cmd, Commands& commands, std::function<int()> action) {
  cmd->callback([&commands, action = std::move(action)] { commands.run = action; });
}

// The engine flags shared by generate, bench (and later chat, serve).
void add_engine_flags(CLI::App& cmd, Config& config);

void add_make_model(CLI::App& app, Commands& commands);
void add_generate(CLI::App& app, Commands& commands);
void add_bench(CLI::App& app, Commands& commands);
void add_bench_comm(CLI::App& app, Commands& commands);
void add_bench_serve(CLI::App& app, Commands& commands);
void add_serve(CLI::App& app, Commands& commands);
void add_chat(CLI::App& app, Commands& commands);
void add_tokenize(CLI::App& app, Commands& commands);
void add_perplexity(CLI::App& app, Commands& commands);

}  // namespace nanovllm::cli
