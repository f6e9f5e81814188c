#pragma once
// RequestStream: the events of one request handed from the engine thread to its reader
// (vLLM's AsyncStream). The engine thread never waits on a reader: it appends to a queue, merging
// into the last unread token event, so a slow reader costs memory bounded by the request's own
// output and never stalls the engine.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nanovllm/logprobs.h"

namespace nanovllm {

struct RequestEvent {
  std::vector<int32_t> token_ids;        // tokens generated since the previous event
  std::string text;                      // text completed since the previous event
  std::vector<StepLogprobs> logprobs;    // one per token in token_ids, when requested
  bool finished = false;                 // the last event of the stream
  std::string finish_reason;             // when finished: "stop" | "length" | "abort" | "error"
  std::string error;                     // when finish_reason == "error"
  std::string stop_reason;               // the stop string that matched, if any
  int num_prompt_tokens = 0;             // usage, as of this event
  int num_completion_tokens = 0;
};

class RequestStream {
 public:
  explicit RequestStream(int64_t request_id) : request_id_(request_id) {}

  int64_t request_id() const { return request_id_; }

  // The next event, waiting up to `timeout`; nullopt on timeout or once the final event was read.
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout);
  // The next event if one is queued (never waits).
  std::optional<RequestEvent> try_next();
  // Called on the engine thread whenever the queue turns non-empty (it must not block; an event
  // loop posts a wake-up). Set it before the first event can arrive or check try_next() after.
  void set_notify(std::function<void()> notify);
  // The final event has been queued.
  bool finished() const;

  // Engine side.
  void push(RequestEvent event);

 private:
  const int64_t request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> queue_;
  std::function<void()> notify_;
  bool finished_ = false;  // the final event is queued (or read)
};

}  // namespace nanovllm
