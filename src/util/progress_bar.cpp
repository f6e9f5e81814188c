#include "util/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace nanovllm {

namespace {

constexpr auto kMinInterval = std::chrono::milliseconds(100);

// tqdm's unicode bar: a space, then 1/8 .. 8/8 blocks.
constexpr const char* kEighths[9] = {" ", "▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};

size_t display_width(const std::string& s) {  // UTF-8 code points; the bar glyphs are one cell
  return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

ProgressBar::ProgressBar(int64_t total, std::string desc, bool enabled, std::FILE* out, bool force)
    : desc_(std::move(desc)),
      total_(total),
      out_(out),
      active_(enabled && out != nullptr && (force || isatty(fileno(out)))),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_),
      last_update_(start_) {
  if (active_) draw();
}

ProgressBar::~ProgressBar() { close(); }

void ProgressBar::update(int64_t num_done, int64_t num_prefill_tokens, int64_t num_decode_tokens) {
  n_ += num_done;
  auto now = std::chrono::steady_clock::now();
  double dt = std::chrono::duration<double>(now - last_update_).count();
  last_update_ = now;
  if (dt > 0 && (num_prefill_tokens > 0 || num_decode_tokens > 0)) {
    if (num_prefill_tokens > 0) prefill_tok_s_ = double(num_prefill_tokens) / dt;
    if (num_decode_tokens > 0) decode_tok_s_ = double(num_decode_tokens) / dt;
    postfix_ = fmt::format("Prefill={}tok/s, Decode={}tok/s", int64_t(prefill_tok_s_),
                           int64_t(decode_tok_s_));
  }
  if (!active_ || closed_) return;
  if (now - last_draw_ >= kMinInterval || n_ >= total_) draw();
}

void ProgressBar::set_postfix(std::string postfix) { postfix_ = std::move(postfix); }

void ProgressBar::close() {
  if (closed_) return;
  closed_ = true;
  if (!active_) return;
  draw();
  std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressBar::draw() {
  last_draw_ = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
  std::string line = format(desc_, n_, total_, elapsed, postfix_);
  size_t len = display_width(line);
  if (len < last_len_) line.append(last_len_ - len, ' ');
  last_len_ = len;
  std::fputc('\r', out_);
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
}

std::string ProgressBar::format_interval(double seconds) {
  int64_t s = int64_t(std::max(0.0, seconds));
  int64_t h = s / 3600, m = s / 60 % 60;
  s %= 60;
  return h > 0 ? fmt::format("{:d}:{:02d}:{:02d}", h, m, s) : fmt::format("{:02d}:{:02d}", m, s);
}

std::string ProgressBar::format(const std::string& desc, int64_t n, int64_t total,
                                double elapsed_s, const std::string& postfix, int bar_width) {
  double frac = total > 0 ? std::clamp(double(n) / double(total), 0.0, 1.0) : 0.0;
  int64_t eighths = int64_t(frac * bar_width * 8);
  int64_t full = eighths / 8, part = eighths % 8;
  std::string bar;
  for (int64_t i = 0; i < full; ++i) bar += kEighths[8];
  if (full < bar_width) {
    bar += kEighths[part];
    bar.append(size_t(bar_width - full - 1), ' ');
  }
  std::string remaining =
      n > 0 && total >= n ? format_interval(elapsed_s / double(n) * double(total - n)) : "?";
  return fmt::format("{}{}{:3.0f}%|{}| {}/{} [{}<{}{}{}]", desc, desc.empty() ? "" : ": ",
                     frac * 100, bar, n, total, format_interval(elapsed_s), remaining,
                     postfix.empty() ? "" : ", ", postfix);
}

}  // namespace nanovllm
