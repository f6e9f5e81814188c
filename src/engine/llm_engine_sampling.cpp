// LLMEngine's request side of sampling: validation with vLLM's ranges, resolution against
// generation_config.json, the n samples of one request (siblings admitted once the first sample's
// prompt KV is cached, so they share its full blocks through the prefix cache), the per-engine
// random base seed, and the logprobs of each step.
#include <algorithm>
#include <cmath>
#include <random>

#include "engine/llm_engine.h"
#include "runtime/sampling_rng.h"

namespace nanovllm {

uint64_t LLMEngine::draw_base_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

void LLMEngine::validate(const std::vector<int32_t>& prompt, const SamplingParams& p) const {
  const int vocab = model_config_.vocab_size;
  if (prompt.empty()) fail("prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      fail("prompt token {} at index {} is outside the vocabulary [0, {})", prompt[i], i, vocab);
    }
  }
  if (int64_t(prompt.size()) >= config_.max_model_len) {
    fail("prompt has {} tokens; max_model_len {} leaves no room to generate", prompt.size(),
         config_.max_model_len);
  }
  if (p.n < 1 || p.n > kMaxSamples) fail("n must be in [1, {}], got {}", kMaxSamples, p.n);
  if (p.max_tokens < 1) fail("max_tokens must be >= 1, got {}", p.max_tokens);
  if (p.min_tokens < 0) fail("min_tokens must be >= 0, got {}", p.min_tokens);
  if (p.min_tokens > p.max_tokens) {
    fail("min_tokens must be <= max_tokens ({}), got {}", p.max_tokens, p.min_tokens);
  }
  if (p.temperature && !(std::isfinite(*p.temperature) && *p.temperature >= 0)) {
    fail("temperature must be a finite number >= 0, got {}", *p.temperature);
  }
  if (p.top_p && !(*p.top_p > 0 && *p.top_p <= 1)) fail("top_p must be in (0, 1], got {}", *p.top_p);
  if (p.top_k && *p.top_k < -1) fail("top_k must be -1, 0 (off) or positive, got {}", *p.top_k);
  if (!(p.min_p >= 0 && p.min_p <= 1)) fail("min_p must be in [0, 1], got {}", p.min_p);
  if (p.repetition_penalty &&
      !(std::isfinite(*p.repetition_penalty) && *p.repetition_penalty > 0)) {
    fail("repetition_penalty must be a finite number > 0, got {}", *p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2)) {
    fail("presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) {
    fail("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  }
  for (auto [token, bias] : p.logit_bias) {
    if (token < 0 || token >= vocab) {
      fail("logit_bias: token id {} is outside the vocabulary [0, {})", token, vocab);
    }
    if (!std::isfinite(bias)) fail("logit_bias: the bias of token {} must be finite, got {}", token, bias);
  }
  for (int32_t token : p.stop_token_ids) {
    if (token < 0 || token >= vocab) {
      fail("stop_token_ids: token id {} is outside the vocabulary [0, {})", token, vocab);
    }
  }
  for (const std::string& s : p.stop) {
    if (s.empty()) fail("stop: a stop string must not be empty");
  }
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > kMaxLogprobs)) {
    fail("logprobs must be in [0, {}], got {}", kMaxLogprobs, *p.logprobs);
  }
  if (p.prompt_logprobs && (*p.prompt_logprobs < -1 || *p.prompt_logprobs > kMaxLogprobs)) {
    fail("prompt_logprobs must be in [0, {}] or -1 (the whole vocabulary), got {}", kMaxLogprobs,
         *p.prompt_logprobs);
  }
}

ResolvedSampling LLMEngine::resolve(const SamplingParams& p, int64_t request_id) const {
  ResolvedSampling r;
  r.temperature = p.temperature.value_or(generation_config_.temperature.value_or(1.0f));
  r.top_k = std::max(0, p.top_k.value_or(generation_config_.top_k.value_or(0)));
  r.top_p = p.top_p.value_or(generation_config_.top_p.value_or(1.0f));
  r.max_tokens = p.max_tokens;
  r.ignore_eos = p.ignore_eos;
  // An explicit seed repeats; otherwise a per-request seed from this engine's random base.
  r.seed = p.seed ? *p.seed : mix64(base_seed_ ^ mix64(uint64_t(request_id)));
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty.value_or(1.0f);
  r.frequency_penalty = p.frequency_penalty;
  r.presence_penalty = p.presence_penalty;
  for (auto [token, bias] : p.logit_bias) {
    r.logit_bias.emplace_back(token, std::clamp(bias, -100.0f, 100.0f));  // as vLLM
  }
  r.min_tokens = p.min_tokens;
  r.stop_token_ids = p.stop_token_ids;
  if (p.min_tokens > 0) {
    r.min_tokens_mask = p.stop_token_ids;
    if (!p.ignore_eos) r.min_tokens_mask.insert(r.min_tokens_mask.end(), eos_token_ids_.begin(), eos_token_ids_.end());
    std::sort(r.min_tokens_mask.begin(), r.min_tokens_mask.end());
    r.min_tokens_mask.erase(std::unique(r.min_tokens_mask.begin(), r.min_tokens_mask.end()),
                            r.min_tokens_mask.end());
  }
  r.logprobs = p.logprobs.value_or(-1);
  r.prompt_logprobs = p.prompt_logprobs;
  r.n = p.n;
  return r;
}

std::shared_ptr<const structured::CompiledGrammar> LLMEngine::compile_structured(
    const SamplingParams& params) {
  if (!params.structured_outputs) return nullptr;
  const StructuredOutputsParams& so = *params.structured_outputs;
  using Kind = structured::GrammarSpec::Kind;
  structured::GrammarSpec spec;
  int set = 0;
  if (so.json) spec = {Kind::kJsonSchema, *so.json, {}}, ++set;
  if (so.json_object) spec = {Kind::kJsonObject, "", {}}, ++set;
  if (so.regex) spec = {Kind::kRegex, *so.regex, {}}, ++set;
  if (so.choice) spec = {Kind::kChoice, "", *so.choice}, ++set;
  if (so.grammar) spec = {Kind::kGbnf, *so.grammar, {}}, ++set;
  if (set != 1)
    fail("structured_outputs: set exactly one of json, json_object, regex, choice, grammar (got {})", set);
  if (so.choice && so.choice->empty()) fail("structured_outputs: choice is an empty list");
  if (params.min_tokens > 0)
    fail("structured_outputs: min_tokens is not supported with a grammar (the grammar decides "
         "where the output may end)");
  if (eos_token_ids_.empty()) fail("structured_outputs: the model has no eos_token_id to end an output with");
  const Tokenizer& tokenizer = require_tokenizer();
  std::call_once(grammar_vocab_once_, [&] {
    grammar_vocab_ = std::make_shared<const structured::TokenVocabulary>(
        tokenizer, model_config_.vocab_size, std::vector<int32_t>(eos_token_ids_.begin(), eos_token_ids_.end()));
  });
  return grammar_cache_.get(spec);
}

int64_t LLMEngine::add_request(std::vector<int32_t> prompt, const SamplingParams& params) {
  validate(prompt, params);
  const std::shared_ptr<const structured::CompiledGrammar> grammar = compile_structured(params);
  auto constrain = [&](Sequence& seq) {
    if (grammar) seq.grammar = std::make_unique<structured::GrammarMatcher>(grammar, grammar_vocab_);
  };
  const int64_t id = next_seq_id_;
  next_seq_id_ += params.n;
  const ResolvedSampling resolved = resolve(params, id);
  std::vector<std::unique_ptr<Sequence>> siblings;
  for (int i = 1; i < params.n; ++i) {
    ResolvedSampling s = resolved;
    s.sample_index = i;
    s.seed = sample_seed(resolved.seed, i);
    s.prompt_logprobs.reset();  // the prompt's logprobs come with sample 0
    auto seq = std::make_unique<Sequence>(id + i, prompt, s, config_.block_size);
    seq->request_id = id;
    constrain(*seq);
    siblings.push_back(std::move(seq));
  }
  auto first = std::make_unique<Sequence>(id, std::move(prompt), resolved, config_.block_size);
  constrain(*first);
  scheduler_->add(std::move(first));
  if (!siblings.empty()) pending_siblings_.emplace_back(id, std::move(siblings));
  return id;
}

void LLMEngine::admit_siblings(int64_t request_id) {
  for (auto it = pending_siblings_.begin(); it != pending_siblings_.end(); ++it) {
    if (it->first != request_id) continue;
    for (auto& seq : it->second) scheduler_->add(std::move(seq));
    pending_siblings_.erase(it);
    return;
  }
}

bool LLMEngine::abort_pending_sibling(int64_t seq_id) {
  for (auto it = pending_siblings_.begin(); it != pending_siblings_.end(); ++it) {
    auto& group = it->second;
    for (auto s = group.begin(); s != group.end(); ++s) {
      if ((*s)->seq_id != seq_id) continue;
      group.erase(s);
      if (group.empty()) pending_siblings_.erase(it);
      return true;
    }
  }
  return false;
}

void LLMEngine::after_step(const std::vector<Sequence*>& seqs, StepResult& result) {
  // Logprobs of this step's new tokens, from the raw logits of the step.
  bool any = false;
  for (const Sequence* s : seqs) any |= s->sampling.logprobs >= 0;
  if (any && !result.new_tokens.empty()) {
    std::vector<int32_t> tokens(seqs.size(), 0), num_top(seqs.size(), -1);
    for (auto [seq_id, token] : result.new_tokens) {
      for (size_t i = 0; i < seqs.size(); ++i) {
        if (seqs[i]->seq_id != seq_id) continue;
        tokens[i] = token;
        num_top[i] = seqs[i]->sampling.logprobs;
      }
    }
    std::vector<StepLogprobs> rows;
    backend_->compute_logprobs(model_runner_->last_logits(), tokens, num_top, rows);
    for (auto [seq_id, token] : result.new_tokens) {
      StepLogprobs lp;
      for (size_t i = 0; i < seqs.size(); ++i)
        if (seqs[i]->seq_id == seq_id) lp = rows[i];
      result.new_logprobs.push_back(std::move(lp));
    }
  }
  // Siblings of a request whose first sample has its prompt cached (it produced a token) or ended.
  if (pending_siblings_.empty()) return;
  std::vector<int64_t> ready;
  for (auto [seq_id, token] : result.new_tokens) ready.push_back(seq_id);
  for (const auto& seq : result.finished) ready.push_back(seq->seq_id);
  for (int64_t id : ready) admit_siblings(id);
}

}  // namespace nanovllm
