// nanovllm tokenize: the ids of a text as one JSON array (llama-tokenize's role).
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "util/check.h"
#include "util/file.h"

namespace nanovllm::cli {

void add_tokenize(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("tokenize", "print the token ids of a text as a JSON array");
  struct Args {
    std::string model, text, file;
    bool no_special = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "model folder (with tokenizer.json)")->required();
  auto* text = cmd->add_option("--text", a->text, "the text");
  auto* file = cmd->add_option("--file", a->file, "a file holding the text");
  text->excludes(file);
  cmd->add_flag("--no-special", a->no_special, "treat special-token text as plain text");
  on_run(cmd, commands, [a, text, file] {
    if (!text->count() && !file->count()) fail("tokenize: give --text or --file");
    Tokenizer tok = Tokenizer::from_file((std::filesystem::path(a->model) / "tokenizer.json").string());
    std::vector<int32_t> ids = tok.encode(file->count() ? read_file(a->file) : a->text, !a->no_special);
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    return 0;
  });
}

}  // namespace nanovllm::cli
