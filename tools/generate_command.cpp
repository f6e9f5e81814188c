#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "nanovllm/llm.h"
#include "tools/cli_options.h"
#include "tools/commands.h"
#include "util/check.h"

namespace nanovllm::cli {

// "1, 2,3" -> {1, 2, 3}; Error naming the bad piece otherwise.
std::vector<int32_t> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string piece = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t b = piece.find_first_not_of(" \t"), e = piece.find_last_not_of(" \t");
    piece = b == std::string::npos ? "" : piece.substr(b, e - b + 1);
    if (piece.empty() && comma == std::string::npos && ids.empty()) break;  // "" -> empty prompt
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(piece, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (piece.empty() || used != piece.size() || v < INT32_MIN || v > INT32_MAX) {
      fail("--prompt-ids: '{}' is not a token id (expected comma-separated integers)", piece);
    }
    ids.push_back(int32_t(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

// [{"token_id", "logprob", "rank", "top": [[id, logprob], ...]}, ...] (non-finite logprobs as null)
nlohmann::json logprobs_json(const std::vector<StepLogprobs>& lps) {
  auto value = [](float v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json out = nlohmann::json::array();
  for (const StepLogprobs& lp : lps) {
    nlohmann::json top = nlohmann::json::array();
    for (const Logprob& t : lp.top) top.push_back({t.token_id, value(t.logprob)});
    out.push_back({{"token_id", lp.sampled.token_id}, {"logprob", value(lp.sampled.logprob)}, {"rank", lp.rank},
                   {"top", top}});
  }
  return out;
}

void add_generate(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("generate", "generate completions for prompts");
  struct Args {
    Config config;
    std::vector<std::string> prompt_ids;
    std::vector<std::string> prompts;
    SamplingParams params;
    uint64_t seed = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  add_engine_flags(*cmd, a->config);
  auto* ids = cmd->add_option("--prompt-ids", a->prompt_ids,
                              "a prompt as comma-separated token ids (repeatable)");
  auto* text = cmd->add_option("--prompt", a->prompts, "a text prompt (repeatable)");
  ids->excludes(text);
  add_sampling_flags(*cmd, a->params);
  cmd->add_option("--max-tokens", a->params.max_tokens, "tokens to generate at most");
  cmd->add_flag("--ignore-eos", a->params.ignore_eos, "do not stop at eos");
  auto* seed = cmd->add_option("--seed", a->seed, "sampling seed: the same seed gives the same tokens (prompt i uses seed + i)")
                   ->default_str("none: every run differs");
  cmd->add_option("--logprobs", a->params.logprobs, "per generated token: its logprob and this many top ones (0..20; --json)")
      ->default_str("none");
  cmd->add_option("--prompt-logprobs", a->params.prompt_logprobs,
                  "per prompt token after the first: its logprob and this many top ones (0..20, -1: all; --json)")
      ->default_str("none");
  cmd->add_flag("--json", a->json, "print one JSON array on stdout");
  on_run(cmd, commands, [a, seed] {
    if (a->prompt_ids.empty() && a->prompts.empty()) fail("generate: give --prompt or --prompt-ids");
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& p : a->prompt_ids) prompts.push_back(parse_token_ids(p));
    const size_t n = a->prompts.empty() ? prompts.size() : a->prompts.size();
    std::vector<SamplingParams> params(n, a->params);
    if (seed->count()) {
      for (size_t i = 0; i < params.size(); ++i) params[i].seed = a->seed + i;
    }
    LLM llm(a->config);
    std::vector<GenerationOutput> outs =
        a->prompts.empty() ? llm.generate(prompts, params) : llm.generate(a->prompts, params);
    if (a->json) {
      nlohmann::json j = nlohmann::json::array();
      for (const GenerationOutput& o : outs) {
        nlohmann::json e = {{"token_ids", o.token_ids}, {"finish_reason", o.finish_reason}};
        if (llm.engine().tokenizer()) e["text"] = o.text;
        if (!o.error.empty()) e["error"] = o.error;
        if (a->params.logprobs) e["logprobs"] = logprobs_json(o.logprobs);
        if (a->params.prompt_logprobs) e["prompt_logprobs"] = logprobs_json(o.prompt_logprobs);
        j.push_back(e);
      }
      // Generated text may end inside a UTF-8 sequence: invalid bytes print as U+FFFD.
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      for (size_t i = 0; i < outs.size(); ++i) {
        std::printf("[%zu] finish_reason=%s", i, outs[i].finish_reason.c_str());
        if (llm.engine().tokenizer()) {
          std::printf(" text: %s", outs[i].text.c_str());
          if (!outs[i].error.empty()) std::printf(" error: %s", outs[i].error.c_str());
          std::printf("\n");
          continue;
        }
        std::printf(" tokens:");
        for (int32_t t : outs[i].token_ids) std::printf(" %d", t);
        if (!outs[i].error.empty()) std::printf(" error: %s", outs[i].error.c_str());
        std::printf("\n");
      }
    }
    // A request that failed is an error of the command: named on stderr, exit status 1 (the
    // output above still shows every request, the failed ones with their error).
    int failed = 0;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].finish_reason == "error" || !outs[i].error.empty()) {
        std::fprintf(stderr, "error: prompt %zu: %s\n", i, outs[i].error.c_str());
        ++failed;
      }
    return failed ? 1 : 0;
  });
}

}  // namespace nanovllm::cli
