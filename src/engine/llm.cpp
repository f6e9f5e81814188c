#include "nanovllm/llm.h"

#include <condition_variable>
#include <mutex>
#include <optional>

#include "engine/async_llm_engine.h"
#include "engine/llm_engine.h"
#include "tokenizer/chat_template.h"
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
  // Built on the streaming API: one engine thread for this call, one stream per prompt.
  const Tokenizer* tokenizer = engine_->tokenizer();
  std::vector<GenerationOutput> outputs(prompts.size());
  ProgressBar bar(int(prompts.size()), "Generating", show_progress_);
  {
    AsyncLLMEngine async(*engine_);
    async.set_step_observer([&bar](const StepInfo& s) {
      bar.update(s.num_finished, s.num_prefill_tokens, s.num_decode_tokens);
    });
    RequestOptions options;
    options.detokenize = tokenizer != nullptr;
    std::vector<SamplingParams> per_prompt;
    for (size_t i = 0; i < prompts.size(); ++i) per_prompt.push_back(param(i));
    std::vector<std::shared_ptr<RequestStream>> streams = async.add_requests(prompts, per_prompt, options);
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false;
    for (auto& s : streams) {
      s->set_notify([&] {
        {
          std::lock_guard lock(mu);
          woken = true;
        }
        cv.notify_one();
      });
    }
    std::vector<bool> done(prompts.size(), false);
    size_t remaining = prompts.size();
    while (remaining > 0) {
      bool any = false;
      for (size_t i = 0; i < streams.size(); ++i) {
        if (done[i]) continue;
        while (std::optional<RequestEvent> e = streams[i]->try_next()) {
          any = true;
          GenerationOutput& out = outputs[i];
          out.token_ids.insert(out.token_ids.end(), e->token_ids.begin(), e->token_ids.end());
          out.text += e->text;
          if (on_text && !e->text.empty()) on_text(i, e->text);
          if (e->finished) {
            out.finish_reason = e->finish_reason;
            out.error = e->error;
            done[i] = true;
            --remaining;
            break;
          }
        }
      }
      if (!any && remaining > 0) {
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return woken; });
        woken = false;
      }
    }
    async.shutdown();  // the observer runs on the engine thread: join it before closing the bar
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
