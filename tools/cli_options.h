#pragma once
// Option helpers shared by the subcommands: byte sizes (512M, 4G, 4GiB, plain bytes) and the
// sampling flags of generate and chat.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "nanovllm/sampling_params.h"

namespace nanovllm::cli {

// A byte-size option: src/util/parse_size.h's forms; --help shows the default as a size.
CLI::Option* add_size_option(CLI::App& cmd, const std::string& name, int64_t& bytes, const std::string& help);

// --temperature --top-k --top-p --min-p --stop (repeatable) and add_structured_flags' into
// `params`; unset ones keep the model's generation_config.json value (or SamplingParams' default).
void add_sampling_flags(CLI::App& cmd, SamplingParams& params);
// Structured outputs (SamplingParams::structured_outputs), at most one of: --json-schema FILE,
// --json-object, --regex R, --choice S (repeatable), --grammar FILE (GBNF).
void add_structured_flags(CLI::App& cmd, SamplingParams& params);

}  // namespace nanovllm::cli
