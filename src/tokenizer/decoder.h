#pragma once
// The tokenizer.json decoder: ids -> text, as Hugging Face's decoders compute it, one token
// at a time so that the same code serves decode() and the streaming detokenizer.
//
// Two families are supported (anything else is refused by the loader):
//  - ByteLevel: each token's characters map back to bytes (see byte_level.h); the byte
//    stream is decoded lossily (one U+FFFD per maximal invalid subpart).
//  - SentencePiece-style Sequence, in this order, each step optional:
//      Replace*       per token, e.g. "▁" -> " "
//      ByteFallback   a run of consecutive <0xNN> tokens becomes its bytes when they are
//                     valid UTF-8 as a whole, else one U+FFFD per byte of the run
//      Fuse           the tokens joined (always the result in the end)
//      Strip          up to `strip_start` leading `strip_content` characters of the whole
//                     text removed (Llama 2's leading space); only after Fuse
//    or Metaspace alone: "▁" -> " ", except that the first token loses its "▁"s.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nanovllm {

class Regex;

struct DecoderConfig {
  enum class Kind { kByteLevel, kPieces } kind = Kind::kByteLevel;
  // kPieces:
  bool byte_fallback = false;
  size_t strip_start = 0;       // characters to strip at the start of the text
  std::string strip_content;    // the character stripped (UTF-8 of one code point)
  bool metaspace = false;       // Metaspace decoder
  std::string metaspace_replacement;
  bool metaspace_drop_first = true;  // prepend_scheme != never: the first token's "▁"s vanish
};

// Decoding state over a stream of tokens (not thread-safe; one per stream).
class DecodeState {
 public:
  explicit DecodeState(const DecoderConfig& config) : config_(&config) {}

  // Appends one token to the stream and the text it completed to `out`.
  //   text:  the token's text (vocab string or added token content)
  //   piece: what it contributes on its own: kByteLevel its bytes; kPieces its text after
  //          the Replace steps (Metaspace: "▁" -> " ")
  //   byte:  kPieces with ByteFallback: the byte of a <0xNN> token, else -1
  void add(std::string_view text, std::string_view piece, int byte, std::string& out);
  // Ends the stream: flushes what was held back, and resets for a new stream.
  void finish(std::string& out);

  // Bytes held back: an incomplete UTF-8 character (byte-level, at most 3) or a run of
  // <0xNN> tokens not yet closed (which a later byte could still turn into U+FFFDs).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  void emit(std::string_view text, std::string& out);
  void flush_run(std::string& out);

  const DecoderConfig* config_;
  std::string pending_;        // byte-level: undecoded bytes; pieces: the open <0xNN> run
  bool run_invalid_ = false;   // the open run can no longer be valid UTF-8
  size_t num_checked_ = 0;     // leading bytes of the open run known to be whole characters
  size_t num_tokens_ = 0;      // tokens so far (Metaspace's first-token rule)
  size_t num_stripped_ = 0;    // Strip: characters stripped so far
  bool strip_done_ = false;    // Strip: some text has been emitted
};

// The byte a ByteFallback token stands for: "<0xNN>" (6 bytes, NN hexadecimal, as Rust's
// u8::from_str_radix reads it, which also takes "+N"), else -1.
int byte_fallback_value(std::string_view token);

}  // namespace nanovllm
