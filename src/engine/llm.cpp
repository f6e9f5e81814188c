#include "nanovllm/llm.h"

#include <map>

#include "engine/llm_engine.h"
#include "util/progress_bar.h"

namespace nanovllm {

LLM::LLM(const Config& config)
    : engine_(std::make_unique<LLMEngine>(config)), show_progress_(config.show_progress) {}

LLM::~LLM() = default;

std::vector<GenerationOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<SamplingParams>& params) {
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
  std::map<int64_t, size_t> index_of;
  for (size_t i = 0; i < prompts.size(); ++i) index_of[engine_->add_request(prompts[i], param(i))] = i;

  std::vector<GenerationOutput> outputs(prompts.size());
  ProgressBar bar(int(prompts.size()), "Generating", show_progress_);
  while (!engine_->is_finished()) {
    StepResult r = engine_->step();
    for (auto& seq : r.finished) {
      auto it = index_of.find(seq->seq_id);
      if (it == index_of.end()) continue;  // a request added outside this call
      GenerationOutput& out = outputs[it->second];
      out.token_ids.assign(seq->token_ids.begin() + seq->num_prompt_tokens, seq->token_ids.end());
      out.finish_reason = finish_reason_name(seq->finish_reason);
      out.error = seq->error;
    }
    bar.update(int(r.finished.size()), r.num_prefill_tokens, r.num_decode_tokens);
  }
  bar.close();
  return outputs;
}

}  // namespace nanovllm
