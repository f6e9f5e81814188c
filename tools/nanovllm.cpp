// The nanovllm CLI: make-model, generate, chat, tokenize, bench.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "tools/commands.h"
#include "util/check.h"

int main(int argc, char** argv) {
  CLI::App app{"nanovllm: a fast, small, readable LLM inference engine"};
  app.require_subcommand(1);
  nanovllm::cli::Commands commands;
  nanovllm::cli::add_make_model(app, commands);
  nanovllm::cli::add_generate(app, commands);
  nanovllm::cli::add_bench(app, commands);
  nanovllm::cli::add_bench_comm(app, commands);
  nanovllm::cli::add_bench_serve(app, commands);
  nanovllm::cli::add_serve(app, commands);
  nanovllm::cli::add_chat(app, commands);
  nanovllm::cli::add_tokenize(app, commands);
  try {
    app.parse(argc, argv);
    return commands.run();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const nanovllm::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fatal: %s\n", e.what());
    return 2;
  }
}
