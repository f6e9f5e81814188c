#pragma once
// ProgressBar: a tqdm-like bar, as nano-vllm shows during generate:
//   Generating:  37%|███▋      | 95/256 [00:12<00:20, Prefill=1234tok/s, Decode=567tok/s]
// Redrawn in place with '\r' on `out` (stderr by default), at most ~10 times a second (and when it
// completes), only when `out` is a terminal unless forced. Throughputs are measured per update()
// (one engine step): tokens of the step / time since the previous update, as nano-vllm does.
// Not thread-safe; one bar per generate call.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace nanovllm {

class ProgressBar {
 public:
  // enabled: the caller wants a bar (e.g. Config::show_progress); it is drawn only if `out` is a
  // terminal or `force` is set.
  ProgressBar(int64_t total, std::string desc, bool enabled = true, std::FILE* out = stderr,
              bool force = false);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // One step: num_done more items done; a step with prefill (decode) tokens updates the shown
  // "Prefill=Ntok/s, Decode=Ntok/s" postfix.
  void update(int64_t num_done = 1, int64_t num_prefill_tokens = 0, int64_t num_decode_tokens = 0);
  void set_postfix(std::string postfix);     // replaces the postfix shown after the times
  void close();                              // final draw and newline (idempotent)
  bool active() const { return active_; }
  int64_t n() const { return n_; }

  // The line for n of total done after elapsed_s seconds (no '\r'); bar_width cells of
  // " ▏▎▍▌▋▊▉█" eighths, like tqdm.
  static std::string format(const std::string& desc, int64_t n, int64_t total, double elapsed_s,
                            const std::string& postfix, int bar_width = 10);
  // "mm:ss", or "h:mm:ss" from an hour on, like tqdm.
  static std::string format_interval(double seconds);

 private:
  void draw();

  std::string desc_;
  int64_t total_;
  int64_t n_ = 0;
  std::string postfix_;
  std::FILE* out_;
  bool active_;
  bool closed_ = false;
  size_t last_len_ = 0;  // characters of the last line drawn (for padding a shorter one)
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::chrono::steady_clock::time_point last_update_;
  double prefill_tok_s_ = 0, decode_tok_s_ = 0;
};

}  // namespace nanovllm
