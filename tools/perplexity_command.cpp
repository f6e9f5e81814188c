// `nanovllm perplexity`: llama-perplexity's method on our engine. The text is tokenized, cut into
// chunks of --ctx tokens (the remainder dropped), and each chunk is one engine request whose
// prompt logprobs (SamplingParams::prompt_logprobs) score its second half: positions ctx/2 ..
// ctx-2 predict tokens ctx/2+1 .. ctx-1, each with at least half a chunk of context. Chunks run
// batched through the engine, so every engine flag applies (--kv-cache-dtype fp8, --device,
// --tensor-parallel-size, ...). --save-logits keeps the base model's distributions at those
// positions; --kl-divergence compares the current model against them (src/eval/perplexity_stats.h).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "eval/perplexity_stats.h"
#include "nanovllm/llm.h"
#include "tools/commands.h"
#include "util/check.h"

namespace nanovllm::cli {

namespace {

struct PerplexityArgs {
  Config config;
  std::string file;
  int ctx = 512;
  int chunks = 0;      // 0: all
  int batch = 0;       // chunks per engine call (0: by memory)
  std::string save_logits, kl_divergence;
  int save_top_k = 64;
  bool json = false;
};

// FNV-1a over every token's bytes: the same text gives the same tokens only with the same
// vocabulary, and this tells two vocabularies apart even when the text happens to agree.
uint64_t vocab_fingerprint(const Tokenizer& tok, int vocab) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](unsigned char c) { h = (h ^ c) * 1099511628211ull; };
  for (int32_t id = 0; id < vocab; ++id) {
    if (const std::string* b = tok.token_bytes(id)) for (unsigned char c : *b) mix(c);
    mix(0xff);
  }
  return h;
}

// The current model's logprobs by token id [V] from a prompt-logprobs entry of the whole vocab.
std::vector<float> by_id(const StepLogprobs& lp, int vocab) {
  std::vector<float> out(size_t(vocab), -std::numeric_limits<float>::infinity());
  for (const Logprob& l : lp.top) out[size_t(l.token_id)] = l.logprob;
  return out;
}

int run_perplexity(PerplexityArgs& a) {
  std::ifstream in(a.file, std::ios::binary);
  if (!in) fail("--file {}: cannot read it", a.file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) fail("--file {}: the file is empty", a.file);
  if (a.ctx < 4) fail("--ctx must be at least 4, got {}", a.ctx);
  if (!a.save_logits.empty() && !a.kl_divergence.empty()) fail("give --save-logits or --kl-divergence, not both");
  if (a.save_top_k < 0) fail("--save-top-k must be >= 0 (0: the whole distribution), got {}", a.save_top_k);
  if (a.chunks < 0) fail("--chunks must be >= 0 (0: all), got {}", a.chunks);
  if (a.batch < 0) fail("--batch must be >= 0 (0: by memory), got {}", a.batch);

  LLM llm(a.config);
  const LLMEngine& engine = llm.engine();
  const Tokenizer& tok = engine.require_tokenizer();
  const int vocab = engine.model_config().vocab_size;
  const int max_model_len = engine.config().max_model_len;
  if (a.ctx >= max_model_len) {
    fail("--ctx {} needs max_model_len above it (the engine has {}): lower --ctx or raise --max-model-len",
         a.ctx, max_model_len);
  }
  std::vector<int32_t> tokens;
  try {
    tokens = tok.encode(text, /*parse_special=*/false);
  } catch (const Error& e) {
    fail("--file {}: {}", a.file, e.what());
  }
  int num_chunks = int(tokens.size() / size_t(a.ctx));
  if (num_chunks == 0) {
    fail("--file {}: {} tokens, less than one chunk of --ctx {} (give a longer text or a smaller --ctx)", a.file,
         tokens.size(), a.ctx);
  }
  if (a.chunks > 0) num_chunks = std::min(num_chunks, a.chunks);
  tokens.resize(size_t(num_chunks) * size_t(a.ctx));
  const uint64_t fingerprint = vocab_fingerprint(tok, vocab);

  std::optional<eval::LogitsFileReader> base;
  if (!a.kl_divergence.empty()) {
    base.emplace(a.kl_divergence);
    const eval::LogitsFileHeader& h = base->header();
    if (int(h.vocab) != vocab || h.fingerprint != fingerprint) {
      fail("--kl-divergence {}: saved from a model with another vocabulary ({} tokens; this model has {}{})",
           a.kl_divergence, h.vocab, vocab, int(h.vocab) == vocab ? ", the same count but other tokens" : "");
    }
    if (int(h.ctx) != a.ctx || int(h.num_chunks) != num_chunks || base->tokens() != tokens) {
      fail("--kl-divergence {}: saved for another text or chunking ({} chunks of {} tokens; here {} of {})",
           a.kl_divergence, h.num_chunks, h.ctx, num_chunks, a.ctx);
    }
  }
  std::optional<eval::LogitsFileWriter> save;
  if (!a.save_logits.empty()) {
    eval::LogitsFileHeader h{uint32_t(vocab), uint32_t(a.ctx), uint32_t(num_chunks),
                             uint32_t(a.save_top_k >= vocab ? 0 : a.save_top_k), fingerprint};
    save.emplace(a.save_logits, h, tokens);
  }
  const bool full = base || save;  // the whole distribution of every scored position
  // Chunks per engine call: full distributions hold (ctx - 1) x vocab logprobs per chunk.
  const int64_t chunk_bytes = full ? int64_t(a.ctx) * vocab * int64_t(sizeof(Logprob)) : int64_t(a.ctx) * 64;
  int batch = a.batch > 0 ? a.batch : int(std::clamp<int64_t>((int64_t(256) << 20) / chunk_bytes, 1, 64));
  batch = std::min(batch, num_chunks);
  const int first = a.ctx / 2;
  std::fprintf(stderr, "perplexity: %zu tokens of %s: %d chunks of %d, scoring tokens %d..%d of each, %d chunks per batch%s\n",
               tokens.size(), a.file.c_str(), num_chunks, a.ctx, first + 1, a.ctx - 1, batch,
               base ? ", KL divergence against the saved base" : "");

  eval::PerplexityStats ppl;
  eval::KldStats kld;
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 1;
  sp.ignore_eos = true;
  sp.prompt_logprobs = full ? -1 : 0;
  for (int c0 = 0; c0 < num_chunks; c0 += batch) {
    std::vector<std::vector<int32_t>> prompts;
    for (int c = c0; c < std::min(num_chunks, c0 + batch); ++c) {
      prompts.emplace_back(tokens.begin() + int64_t(c) * a.ctx, tokens.begin() + int64_t(c + 1) * a.ctx);
    }
    std::vector<GenerationOutput> outs = llm.generate(prompts, {sp});
    for (size_t i = 0; i < outs.size(); ++i) {
      const GenerationOutput& o = outs[i];
      if (o.finish_reason == "error") fail("chunk {}: {}", c0 + int(i) + 1, o.error);
      NV_CHECK(int(o.prompt_logprobs.size()) == a.ctx - 1, "chunk {}: {} prompt logprobs", c0 + int(i) + 1,
               o.prompt_logprobs.size());
      for (int j = first; j < a.ctx - 1; ++j) {
        const StepLogprobs& lp = o.prompt_logprobs[size_t(j)];  // token j + 1 given tokens 0..j
        const int32_t token = prompts[i][size_t(j) + 1];
        ppl.add(lp.sampled.logprob);
        if (!full) continue;
        const std::vector<float> cur = by_id(lp, vocab);
        if (save) save->write(eval::BaseDistribution::from_full(cur, token, int(save->header().top_k)));
        if (base) kld.add(base->next(), cur, token);
      }
      std::fprintf(stderr, "[%d]%.4f,", c0 + int(i) + 1, ppl.ppl());
    }
    std::fflush(stderr);
  }
  std::fprintf(stderr, "\n");
  if (save) save->close();

  if (a.json) {
    nlohmann::json j = {{"file", a.file}, {"ctx", a.ctx}, {"chunks", num_chunks}, {"tokens_scored", ppl.count},
                        {"ppl", ppl.ppl()}, {"ppl_error", ppl.ppl_error()}, {"mean_nll", ppl.mean_nll()}};
    if (base) {
      j["kld"] = {{"mean", kld.mean()}, {"mean_error", kld.mean_error()}, {"median", kld.quantile(0.5)},
                  {"p99", kld.quantile(0.99)}, {"max", kld.max()}, {"same_top", kld.same_top_fraction()},
                  {"rms_dp", kld.rms_dp()}, {"base_ppl", kld.base.ppl()}, {"base_saved_top_k", base->header().top_k}};
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("Final estimate: PPL = %.4f +/- %.5f (%lld tokens in %d chunks of %d)\n", ppl.ppl(), ppl.ppl_error(),
              static_cast<long long>(ppl.count), num_chunks, a.ctx);
  if (save) std::printf("saved the distributions of %lld positions to %s\n", static_cast<long long>(ppl.count), a.save_logits.c_str());
  if (base) {
    std::printf("base PPL        %10.4f +/- %.5f\n", kld.base.ppl(), kld.base.ppl_error());
    std::printf("Mean KLD        %10.6f +/- %.6f%s\n", kld.mean(), kld.mean_error(),
                base->header().top_k ? " (base saved as its top tokens plus the rest)" : "");
    std::printf("Median KLD      %10.6f\n99.0%%   KLD     %10.6f\nMaximum KLD     %10.6f\n", kld.quantile(0.5),
                kld.quantile(0.99), kld.max());
    std::printf("Same top token  %9.3f%%\nRMS delta p     %9.3f%%\n", 100 * kld.same_top_fraction(), 100 * kld.rms_dp());
  }
  return 0;
}

}  // namespace

void add_perplexity(CLI::App& app, Commands& commands) {
  auto* cmd = app.add_subcommand("perplexity",
                                 "perplexity of a text (llama-perplexity's method), KL divergence against a base model");
  auto a = std::make_shared<PerplexityArgs>();
  add_engine_flags(*cmd, a->config);
  cmd->add_option("--file", a->file, "the text to score")->required();
  cmd->add_option("--ctx", a->ctx, "tokens per chunk; the second half of each is scored");
  cmd->add_option("--chunks", a->chunks, "score at most this many chunks (0: all)");
  cmd->add_option("--batch", a->batch, "chunks per engine call (0: as many as 256 MiB of logprobs hold, at most 64)");
  cmd->add_option("--save-logits", a->save_logits, "write the distributions at the scored positions (the base of a KLD run)");
  cmd->add_option("--save-top-k", a->save_top_k,
                  "--save-logits keeps each distribution's top k tokens and the rest's mass (0: all)");
  cmd->add_option("--kl-divergence", a->kl_divergence, "compare against a --save-logits file: KLD, same top token, delta p");
  cmd->add_flag("--json", a->json, "print one JSON object on stdout");
  on_run(cmd, commands, [a] { return run_perplexity(*a); });
}

}  // namespace nanovllm::cli
