#include "tokenizer/decoder.h"

#include "tokenizer/utf8.h"

namespace nanovllm {

namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

int byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const int lo = hex_digit(token[4]);
  if (lo < 0) return -1;
  if (token[3] == '+') return lo;  // from_str_radix("+A", 16) == 10
  const int hi = hex_digit(token[3]);
  return hi < 0 ? -1 : hi * 16 + lo;
}

void DecodeState::emit(std::string_view text, std::string& out) {
  const DecoderConfig& c = *config_;
  if (!strip_done_ && !text.empty()) {
    // Strip looks at the first characters of the whole text, wherever they come from.
    while (num_stripped_ < c.strip_start && text.substr(0, c.strip_content.size()) == c.strip_content) {
      text.remove_prefix(c.strip_content.size());
      ++num_stripped_;
    }
    if (!text.empty()) strip_done_ = true;
  }
  out += text;
}

void DecodeState::flush_run(std::string& out) {
  if (pending_.empty()) return;
  if (!run_invalid_ && utf8::find_invalid(std::string_view(pending_).substr(num_checked_)) == std::string::npos) {
    const std::string run = std::move(pending_);
    emit(run, out);
  } else if (!run_invalid_) {
    for (size_t i = 0; i < pending_.size(); ++i) emit(kReplacementUtf8, out);
  }
  pending_.clear();
  run_invalid_ = false;
  num_checked_ = 0;
}

void DecodeState::add(std::string_view text, std::string_view piece, int byte, std::string& out) {
  const DecoderConfig& c = *config_;
  if (c.kind == DecoderConfig::Kind::kByteLevel) {
    pending_ += piece;
    const size_t used = utf8::append_lossy(out, pending_, /*final_chunk=*/false);
    pending_.erase(0, used);
    return;
  }
  ++num_tokens_;
  if (c.byte_fallback && byte >= 0) {
    if (run_invalid_) {  // every further byte of an invalid run is one U+FFFD
      emit(kReplacementUtf8, out);
      return;
    }
    pending_ += static_cast<char>(byte);
    // Invalid as a whole as soon as its bytes so far are not a valid UTF-8 prefix: then all of
    // them are U+FFFDs, whatever follows. A valid run is held until it closes. Only the bytes
    // after the last complete character are looked at (so a long run costs linear time).
    const std::string_view tail = std::string_view(pending_).substr(num_checked_);
    std::string scratch;
    const size_t used = utf8::append_lossy(scratch, tail, /*final_chunk=*/false);
    if (utf8::find_invalid(tail.substr(0, used)) != std::string::npos) {
      for (size_t i = 0; i < pending_.size(); ++i) emit(kReplacementUtf8, out);
      run_invalid_ = true;
    } else {
      num_checked_ += used;
    }
    return;
  }
  flush_run(out);
  if (c.metaspace && num_tokens_ == 1 && c.metaspace_drop_first) {
    std::string dropped;
    for (size_t pos = text.find(c.metaspace_replacement), begin = 0;; pos = text.find(c.metaspace_replacement, begin)) {
      dropped += text.substr(begin, pos == std::string_view::npos ? std::string_view::npos : pos - begin);
      if (pos == std::string_view::npos) break;
      begin = pos + c.metaspace_replacement.size();
    }
    emit(dropped, out);
    return;
  }
  emit(piece, out);
}

void DecodeState::finish(std::string& out) {
  if (config_->kind == DecoderConfig::Kind::kByteLevel) {
    utf8::append_lossy(out, pending_, /*final_chunk=*/true);
    pending_.clear();
  } else {
    flush_run(out);
  }
  num_tokens_ = 0;
  num_stripped_ = 0;
  strip_done_ = false;
}

}  // namespace nanovllm
