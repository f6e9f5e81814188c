#include "tools/cli_options.h"

#include "util/check.h"
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
}

}  // namespace nanovllm::cli
