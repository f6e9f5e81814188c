#pragma once
// Streaming decode: feed ids one at a time, get back the text they completed.
//
// Rule: the detokenizer runs the tokenizer's decoder (decoder.h) token by token and holds
// back only what a later token could still change:
//  - byte-level: a trailing sequence that is a valid but incomplete prefix of a UTF-8
//    character (at most 3 bytes). Bytes that can never become valid (a stray continuation
//    byte, an impossible lead, a broken sequence) are emitted at once as U+FFFD, one per
//    maximal invalid subpart, exactly as decode() does.
//  - SentencePiece-style (ByteFallback): an open run of <0xNN> tokens while it is valid
//    UTF-8 so far, since one more invalid byte would turn the whole run into U+FFFDs (HF's
//    rule); a multi-byte character spelled by byte tokens thus comes out whole. The run is
//    released by the next other token (or finish()); once invalid, each byte is one U+FFFD.
// finish() ends the stream (a held-back truncated character becomes U+FFFD).
// Hence, for any ids: concat(add(id) for id in ids) + finish() == decode(ids, skip).
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/decoder.h"
#include "tokenizer/tokenizer.h"

namespace nanovllm {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens), state_(tokenizer.decoder_config()) {}

  // Appends one token; returns the newly completed text (possibly empty).
  std::string add(int32_t id);
  // Appends several tokens; returns the newly completed text.
  std::string add(const std::vector<int32_t>& ids);
  // Flushes what is held back (an incomplete character as U+FFFD) and resets for a new stream.
  std::string finish();

  // Bytes currently held back (byte-level: 0..3).
  size_t num_pending_bytes() const { return state_.num_pending_bytes(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  DecodeState state_;
};

}  // namespace nanovllm
