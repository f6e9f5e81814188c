#include "engine/request_stream.h"

#include <cstddef>
#include <utility>

namespace nanovllm {

std::optional<RequestEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || finished_; });
  if (queue_.empty()) return std::nullopt;
  RequestEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

std::optional<RequestEvent> RequestStream::try_next() {
  std::lock_guard lock(mu_);
  if (queue_.empty()) return std::nullopt;
  RequestEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

void RequestStream::set_notify(std::function<void()> notify) {
  std::lock_guard lock(mu_);
  notify_ = std::move(notify);
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

void RequestStream::push(RequestEvent event, std::vector<std::function<void()>>* deferred) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    if (finished_) return;  // nothing follows the final event
    finished_ = event.finished;
    const bool was_empty = queue_.empty();
    // The latest unread event of the same sample, if that sample has not ended in it.
    size_t at = queue_.size();
    for (size_t i = queue_.size(); i-- > 0;) {
      if (queue_[i].index != event.index) continue;
      if (!queue_[i].sample_finished()) at = i;
      break;
    }
    if (at < queue_.size()) {
      // Merge into the unread event: the reader sees the same tokens and text, in fewer pieces.
      RequestEvent& last = queue_[at];
      last.token_ids.insert(last.token_ids.end(), event.token_ids.begin(), event.token_ids.end());
      last.text += event.text;
      for (auto& lp : event.logprobs) last.logprobs.push_back(std::move(lp));
      if (!event.prompt_logprobs.empty()) last.prompt_logprobs = std::move(event.prompt_logprobs);
      last.finished = event.finished;
      last.finish_reason = std::move(event.finish_reason);
      last.error = std::move(event.error);
      last.stop_reason = std::move(event.stop_reason);
      last.num_prompt_tokens = event.num_prompt_tokens;
      last.num_completion_tokens = event.num_completion_tokens;
      last.num_sample_tokens = event.num_sample_tokens;
      if (last.finished && at + 1 < queue_.size()) {
        // The stream's final event stays the last one read.
        RequestEvent moved = std::move(last);
        queue_.erase(queue_.begin() + std::ptrdiff_t(at));
        queue_.push_back(std::move(moved));
      }
    } else {
      queue_.push_back(std::move(event));
    }
    if (was_empty) notify = notify_;
  }
  cv_.notify_all();
  if (!notify) return;
  if (deferred) {
    deferred->push_back(std::move(notify));
  } else {
    notify();
  }
}

}  // namespace nanovllm
