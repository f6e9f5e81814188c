#pragma once
// Streaming decode: feed ids one at a time, get back the text they completed.
//
// Rule: the detokenizer keeps the decoded byte stream and holds back only a trailing
// sequence that is a valid but incomplete prefix of a UTF-8 character (at most 3 bytes),
// since the next token may complete it. Everything before that is final: bytes that can
// never become valid (a stray continuation byte, an impossible lead, a broken sequence) are
// emitted at once as U+FFFD, one per maximal invalid subpart, exactly as decode() does.
// finish() ends the stream: a held-back truncated character becomes one U+FFFD.
// Hence, for any ids: concat(add(id) for id in ids) + finish() == decode(ids, skip).
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace nanovllm {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Appends one token; returns the newly completed text (possibly empty).
  std::string add(int32_t id);
  // Appends several tokens; returns the newly completed text.
  std::string add(const std::vector<int32_t>& ids);
  // Flushes a held-back incomplete character as U+FFFD and resets for a new stream.
  std::string finish();

  // Bytes currently held back (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  std::string drain(bool final_chunk);

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // decoded bytes not yet emitted
};

}  // namespace nanovllm
