#include "nanovllm/llm.h"

#include <map>
#include <optional>

#include "engine/llm_engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_detokenizer.h"
#include "util/progress_bar.h"

namespace nanovllm {

LLM::LLM(const Config& config)
    : engine_(std::make_unique<LLMEngine>(config)), show_progress_(config.show_progress) {}

LLM::~LLM() = default;

std::vector<GenerationOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<SamplingParams>& params,
                                            const StreamCallback& on_text) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    fail("generate: {} sampling params for {} prompts (give 1 or one per prompt)", params.size(),
         prompts.size());
  }
  auto param = [&](size_t i) -> const SamplingParams& { return params[params.size() == 1 ? 0 : i]; };
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      engine_->validate(prompts[i], param(i));
    } catch (const Error& e) {
      fail("prompt {}: {}", i, e.what());
    }
  }
  const Tokenizer* tokenizer = engine_->tokenizer();
  std::map<int64_t, size_t> index_of;
  for (size_t i = 0; i < prompts.size(); ++i) index_of[engine_->add_request(prompts[i], param(i))] = i;
  // Streaming: one incremental detokenizer per prompt.
  std::vector<std::optional<IncrementalDetokenizer>> streams(prompts.size());
  if (on_text && tokenizer) {
    for (auto& s : streams) s.emplace(*tokenizer, /*skip_special_tokens=*/true);
  }

  std::vector<GenerationOutput> outputs(prompts.size());
  ProgressBar bar(int(prompts.size()), "Generating", show_progress_);
  while (!engine_->is_finished()) {
    StepResult r = engine_->step();
    for (auto [seq_id, token] : r.new_tokens) {
      auto it = index_of.find(seq_id);
      if (it == index_of.end() || !streams[it->second]) continue;
      std::string delta = streams[it->second]->add(token);
      if (!delta.empty()) on_text(it->second, delta);
    }
    for (auto& seq : r.finished) {
      auto it = index_of.find(seq->seq_id);
      if (it == index_of.end()) continue;  // a request added outside this call
      GenerationOutput& out = outputs[it->second];
      out.token_ids.assign(seq->token_ids.begin() + seq->num_prompt_tokens, seq->token_ids.end());
      out.finish_reason = finish_reason_name(seq->finish_reason);
      out.error = seq->error;
      if (tokenizer) out.text = tokenizer->decode(out.token_ids, /*skip_special_tokens=*/true);
      if (streams[it->second]) {
        std::string tail = streams[it->second]->finish();
        if (!tail.empty()) on_text(it->second, tail);
      }
    }
    bar.update(int(r.finished.size()), r.num_prefill_tokens, r.num_decode_tokens);
  }
  bar.close();
  return outputs;
}

std::vector<GenerationOutput> LLM::generate(const std::vector<std::string>& prompts,
                                            const std::vector<SamplingParams>& params,
                                            const StreamCallback& on_text) {
  const Tokenizer& tokenizer = engine_->require_tokenizer();
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (const std::string& p : prompts) ids.push_back(tokenizer.encode(p));
  return generate(ids, params, on_text);
}

std::string LLM::apply_chat_template(const nlohmann::ordered_json& messages,
                                     const ChatOptions& options) const {
  if (!messages.is_array() || messages.empty()) fail("chat: messages must be a non-empty array");
  return engine_->chat_template().render(messages, options.tools, options.add_generation_prompt,
                                         options.template_kwargs);
}

GenerationOutput LLM::chat(const nlohmann::ordered_json& messages, const SamplingParams& params,
                           const ChatOptions& options, const StreamCallback& on_text) {
  return generate(std::vector<std::string>{apply_chat_template(messages, options)}, {params},
                  on_text)[0];
}

}  // namespace nanovllm
