#include "tools/cli_options.h"

#include "util/check.h"
#include "util/file.h"
#include "util/parse_size.h"

namespace nanovllm::cli {

CLI::Option* add_size_option(CLI::App& cmd, const std::string& name, int64_t& bytes, const std::string& help) {
  CLI::Option* opt = cmd.add_option_function<std::string>(
      name,
      [&bytes, name](const std::string& text) {
        try {
          bytes = parse_size(text, name);
        } catch (const Error& e) {
          throw CLI::ValidationError(e.what());
        }
      },
      help + " (bytes, or with a unit: 512M, 4G, 4GiB = x1024; 4GB = x1000)");
  opt->type_name("SIZE")->default_str(bytes == 0 ? "0" : format_size(bytes));
  return opt;
}

void add_sampling_flags(CLI::App& cmd, SamplingParams& p) {
  cmd.add_option_function<float>("--temperature", [&p](const float& v) { p.temperature = v; },
                                 "0 = greedy")
      ->default_str("the model's, else 1");
  cmd.add_option_function<int>("--top-k", [&p](const int& v) { p.top_k = v; },
                               "sample from the k most likely tokens (0 or -1: all)")
      ->default_str("the model's, else off");
  cmd.add_option_function<float>("--top-p", [&p](const float& v) { p.top_p = v; },
                                 "sample from the smallest set of tokens whose probability reaches p, (0, 1]")
      ->default_str("the model's, else 1");
  cmd.add_option("--min-p", p.min_p, "drop tokens less likely than min_p times the most likely, [0, 1]");
  cmd.add_option("--stop", p.stop, "stop before this text (repeatable)")->default_str("none");
  add_structured_flags(cmd, p);
}

void add_structured_flags(CLI::App& cmd, SamplingParams& p) {
  auto so = [&p]() -> StructuredOutputsParams& {
    if (!p.structured_outputs) p.structured_outputs.emplace();
    return *p.structured_outputs;
  };
  // A file's text, read when the flag is parsed (a missing file is a usage error naming it).
  auto file_text = [](const std::string& path) {
    try {
      return read_file(path);
    } catch (const Error& e) {
      throw CLI::ValidationError(e.what());
    }
  };
  auto* schema = cmd.add_option_function<std::string>(
      "--json-schema", [so, file_text](const std::string& f) { so().json = file_text(f); },
      "constrain the output to this JSON schema (a file)");
  schema->type_name("FILE");
  auto* object = cmd.add_flag_function("--json-object", [so](int64_t) { so().json_object = true; },
                                       "constrain the output to a JSON object");
  auto* regex = cmd.add_option_function<std::string>(
      "--regex", [so](const std::string& r) { so().regex = r; }, "constrain the output to match this regex");
  auto* choice = cmd.add_option_function<std::vector<std::string>>(
      "--choice", [so](const std::vector<std::string>& c) { so().choice = c; },
      "the output is exactly one of these strings (repeatable)");
  auto* grammar = cmd.add_option_function<std::string>(
      "--grammar", [so, file_text](const std::string& f) { so().grammar = file_text(f); },
      "constrain the output to this GBNF grammar (a file; rule root)");
  grammar->type_name("FILE");
  const std::vector<CLI::Option*> all = {schema, object, regex, choice, grammar};
  for (CLI::Option* a : all)
    for (CLI::Option* b : all)
      if (a != b) a->excludes(b);
}

}  // namespace nanovllm::cli
