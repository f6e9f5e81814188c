// The nanovllm CLI: make-model, generate, chat, tokenize, bench.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tools/commands.h"
#include "util/check.h"

namespace {

// An error on stderr: "error: ..." as text, or {"error": "..."} when the command was given
// --json (its stdout is then JSON only, and a script reads the error as JSON too).
void report(int argc, char** argv, const char* prefix, const char* what) {
  bool json = false;
  for (int i = 1; i < argc; ++i) json = json || std::strcmp(argv[i], "--json") == 0;
  if (json) std::fprintf(stderr, "%s\n", nlohmann::json{{"error", std::string(what)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else std::fprintf(stderr, "%s: %s\n", prefix, what);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nanovllm: a fast, small, readable LLM inference engine"};
  // --help shows every option's default (options added after this line inherit it).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", std::string("nanovllm ") + NANOVLLM_VERSION);
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
  nanovllm::cli::add_perplexity(app, commands);
  if (argc < 2) {  // no subcommand: the usage, on stderr, and the status of a usage error
    std::cerr << app.help();
    return 2;
  }
  try {
    app.parse(argc, argv);
    return commands.run();
  } catch (const CLI::ParseError& e) {
    // --help and --version: their text on stdout, status 0. A usage error: CLI11's message on
    // stderr, status 2 (as argparse and most CLIs).
    const int status = app.exit(e);
    return status == 0 ? 0 : 2;
  } catch (const nanovllm::Error& e) {
    report(argc, argv, "error", e.what());
    return 1;
  } catch (const std::exception& e) {
    report(argc, argv, "fatal", e.what());
    return 3;
  }
}
