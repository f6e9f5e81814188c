#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "util/check.h"

namespace nanovllm {

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      block_manager_(config.num_blocks, config.block_size, config.enable_prefix_caching, nullptr,
                     config.sliding_window) {
  if (config.max_num_seqs < 1) fail("max_num_seqs must be >= 1, got {}", config.max_num_seqs);
  if (config.max_num_batched_tokens < 1) {
    fail("max_num_batched_tokens must be >= 1, got {}", config.max_num_batched_tokens);
  }
  if (config.max_model_len < 2) fail("max_model_len must be >= 2, got {}", config.max_model_len);
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  NV_CHECK(seq != nullptr);
  NV_CHECK(seq->block_size == config_.block_size, "seq block_size {} != {}", seq->block_size,
           config_.block_size);
  NV_CHECK(seq->status == SequenceStatus::WAITING && seq->block_table.empty() &&
           seq->num_tokens() == seq->num_prompt_tokens);
  std::string error;
  const int64_t num_prompt = seq->num_prompt_tokens;
  const int64_t max_tokens = seq->sampling.max_tokens;
  if (max_tokens < 1) {
    error = fmt::format("max_tokens must be >= 1, got {}", max_tokens);
  } else if (num_prompt >= config_.max_model_len) {
    error = fmt::format("the prompt has {} tokens, which leaves no room for output within "
                        "max_model_len={}", num_prompt, config_.max_model_len);
  } else {
    // At its longest the sequence holds KV for all tokens but the last sampled one.
    int64_t max_len = std::min<int64_t>(num_prompt + max_tokens, config_.max_model_len);
    int64_t num_blocks = (max_len - 1 + config_.block_size - 1) / config_.block_size;
    if (num_blocks > config_.num_blocks) {
      error = fmt::format(
          "the request needs up to {} KV cache blocks ({} prompt tokens + up to {} generated) but "
          "the cache holds {} blocks of {} tokens",
          num_blocks, num_prompt, max_len - num_prompt, config_.num_blocks, config_.block_size);
    }
  }
  if (!error.empty()) {
    seq->error = fmt::format("request {}: {}", seq->seq_id, error);
    rejected_.push_back(std::move(seq));
    return;
  }
  waiting_.push_back(std::move(seq));
}

bool Scheduler::is_finished() const {
  return waiting_.empty() && rejected_.empty() && running_.empty();
}

std::pair<std::vector<Sequence*>, bool> Scheduler::schedule() {
  for (auto& seq : rejected_) {
    finish(*seq, FinishReason::ERROR);
    finished_.push_back(std::move(seq));
  }
  rejected_.clear();
  num_decode_seqs_ = 0;
  NV_CHECK(prefilling_ == nullptr || (!running_.empty() && running_.back().get() == prefilling_),
           "the partial prefill is not the newest running sequence");

  std::vector<Sequence*> scheduled;
  if (!config_.mixed) {
    schedule_prefills(scheduled, config_.max_num_batched_tokens);
    if (!scheduled.empty()) return {std::move(scheduled), true};
    schedule_decodes(scheduled);
    return {std::move(scheduled), false};
  }
  // Mixed: decodes first, then prompt work with the budget they leave.
  schedule_decodes(scheduled);
  const int num_decodes = int(scheduled.size());
  const int budget = config_.max_num_batched_tokens - num_decodes;
  if (budget > 0) schedule_prefills(scheduled, budget);
  if (int(scheduled.size()) == num_decodes) return {std::move(scheduled), false};
  num_decode_seqs_ = num_decodes;
  return {std::move(scheduled), true};
}

void Scheduler::schedule_prefills(std::vector<Sequence*>& scheduled, int budget) {
  // The partial prefill first, then waiting sequences in FIFO order.
  Sequence* partial = std::exchange(prefilling_, nullptr);
  if (partial != nullptr) {
    int remaining = partial->num_tokens() - partial->num_cached_tokens;
    NV_CHECK(remaining > 0);
    partial->num_scheduled_tokens = std::min(remaining, budget);
    budget -= partial->num_scheduled_tokens;
    scheduled.push_back(partial);
    if (partial->num_scheduled_tokens < remaining) prefilling_ = partial;
  }
  while (prefilling_ == nullptr && budget > 0 && !waiting_.empty() &&
         int(running_.size()) < config_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    if (!block_manager_.can_allocate(seq)) break;
    block_manager_.allocate(seq);
    int remaining = seq.num_tokens() - seq.num_cached_tokens;
    seq.num_scheduled_tokens = std::min(remaining, budget);
    budget -= seq.num_scheduled_tokens;
    seq.status = SequenceStatus::RUNNING;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    scheduled.push_back(&seq);
    if (seq.num_scheduled_tokens < remaining) prefilling_ = &seq;  // a chunk; ends the step
  }
}

void Scheduler::schedule_decodes(std::vector<Sequence*>& scheduled) {
  // Every running sequence but the partial prefill, one token each; preempt the newest when
  // blocks run out.
  NV_CHECK(int(running_.size()) <= config_.max_num_seqs);
  std::deque<std::unique_ptr<Sequence>> kept;
  while (!running_.empty()) {
    std::unique_ptr<Sequence> seq = std::move(running_.front());
    running_.pop_front();
    if (seq.get() == prefilling_) {  // mixed mode: its prompt goes on in schedule_prefills
      kept.push_back(std::move(seq));
      continue;
    }
    bool preempted_self = false;
    block_manager_.free_slid_out_blocks(*seq);
    while (!block_manager_.can_append(*seq)) {
      if (!running_.empty()) {
        std::unique_ptr<Sequence> newest = std::move(running_.back());
        running_.pop_back();
        preempt(std::move(newest));
      } else {
        preempt(std::move(seq));
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    block_manager_.may_append(*seq);
    seq->num_scheduled_tokens = 1;
    scheduled.push_back(seq.get());
    kept.push_back(std::move(seq));
  }
  running_ = std::move(kept);
}

void Scheduler::postprocess(const std::vector<Sequence*>& seqs,
                            const std::vector<int32_t>& token_ids, bool is_prefill) {
  NV_CHECK(seqs.size() == token_ids.size(), "{} seqs, {} tokens", seqs.size(), token_ids.size());
  std::vector<Sequence*> finished;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = *seqs[i];
    NV_CHECK(seq.status == SequenceStatus::RUNNING, "seq {} is not running", seq.seq_id);
    if (is_prefill) {
      seq.num_cached_tokens += seq.num_scheduled_tokens;
      NV_CHECK(seq.num_cached_tokens <= seq.num_tokens());
      block_manager_.cache_blocks(seq);  // the chunk's full blocks are computed now
      if (seq.num_cached_tokens < seq.num_tokens()) continue;  // partial prefill: no token yet
    } else {
      NV_CHECK(seq.num_cached_tokens == seq.num_tokens() - 1);
      seq.num_cached_tokens = seq.num_tokens();
      block_manager_.cache_blocks(seq);  // publishes the block this token filled, if it did
    }
    int32_t token = token_ids[i];
    if (seq.grammar) {  // a refused token happens only at a dead end or after a matcher Error
      bool accepted = false;
      try {
        accepted = seq.grammar_error.empty() && seq.grammar->accept_token(token);
      } catch (const Error& e) {
        seq.grammar_error = e.what();
      }
      if (!accepted) {
        seq.error = seq.grammar_error.empty()
                        ? fmt::format("request {}: structured output: the grammar allows no token "
                                      "after {} generated tokens (dead end)",
                                      seq.seq_id, seq.num_completion_tokens())
                        : fmt::format("request {}: structured output: {}", seq.seq_id, seq.grammar_error);
        finish(seq, FinishReason::ERROR);
        finished.push_back(&seq);
        continue;
      }
    }
    seq.append_token(token);
    if (is_stop_token(seq, token)) {
      finish(seq, FinishReason::STOP);
    } else if (seq.grammar && seq.grammar->is_terminated()) {  // complete: nothing may follow
      finish(seq, FinishReason::STOP);
    } else if (seq.num_completion_tokens() >= seq.sampling.max_tokens ||
               seq.num_tokens() >= config_.max_model_len) {
      finish(seq, FinishReason::LENGTH);
    } else {
      continue;
    }
    finished.push_back(&seq);
  }
  for (Sequence* seq : finished) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const std::unique_ptr<Sequence>& s) { return s.get() == seq; });
    NV_CHECK(it != running_.end(), "finished seq {} is not running", seq->seq_id);
    finished_.push_back(std::move(*it));
    running_.erase(it);
  }
}

void Scheduler::abort_step(const std::vector<Sequence*>& seqs, const std::string& error) {
  for (Sequence* seq : seqs) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const std::unique_ptr<Sequence>& s) { return s.get() == seq; });
    if (it == running_.end()) continue;  // finished by postprocess before it threw
    if (prefilling_ == seq) prefilling_ = nullptr;
    seq->error = fmt::format("request {}: {}", seq->seq_id, error);
    finish(*seq, FinishReason::ERROR);
    finished_.push_back(std::move(*it));
    running_.erase(it);
  }
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_finished() {
  return std::exchange(finished_, {});
}

std::unique_ptr<Sequence> Scheduler::abort(int64_t seq_id) {
  auto take = [&](auto& queue) -> std::unique_ptr<Sequence> {
    for (auto it = queue.begin(); it != queue.end(); ++it) {
      if ((*it)->seq_id != seq_id) continue;
      std::unique_ptr<Sequence> seq = std::move(*it);
      queue.erase(it);
      return seq;
    }
    return nullptr;
  };
  std::unique_ptr<Sequence> seq = take(waiting_);
  if (!seq) seq = take(running_);
  if (!seq) seq = take(rejected_);
  if (!seq) return nullptr;
  if (seq.get() == prefilling_) prefilling_ = nullptr;
  if (!seq->block_table.empty()) block_manager_.deallocate(*seq);
  seq->status = SequenceStatus::FINISHED;
  seq->num_scheduled_tokens = 0;
  return seq;
}

void Scheduler::preempt(std::unique_ptr<Sequence> seq) {
  if (seq.get() == prefilling_) {  // mixed mode only: prefill_first runs no decode while partial
    NV_CHECK(config_.mixed);
    prefilling_ = nullptr;
  }
  seq->status = SequenceStatus::WAITING;
  seq->num_scheduled_tokens = 0;
  block_manager_.deallocate(*seq);
  waiting_.push_front(std::move(seq));
  ++num_preemptions_;
}

void Scheduler::finish(Sequence& seq, FinishReason reason) {
  seq.status = SequenceStatus::FINISHED;
  seq.finish_reason = reason;
  block_manager_.deallocate(seq);
}

// eos (unless ignore_eos) or one of stop_token_ids, once min_tokens tokens were generated
// (vLLM: the output, this token included, has at least min_tokens tokens).
bool Scheduler::is_stop_token(const Sequence& seq, int32_t token_id) const {
  const ResolvedSampling& s = seq.sampling;
  if (seq.num_completion_tokens() < s.min_tokens) return false;
  if (!s.ignore_eos && is_eos(token_id)) return true;
  return std::find(s.stop_token_ids.begin(), s.stop_token_ids.end(), token_id) !=
         s.stop_token_ids.end();
}

bool Scheduler::is_eos(int32_t token_id) const {
  return std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), token_id) !=
         config_.eos_token_ids.end();
}

}  // namespace nanovllm
