#pragma once
// A Hugging Face tokenizer.json with a BPE model, encoding and decoding byte for byte as the
// `tokenizers` library does. Two families:
//  - byte-level BPE (GPT-2, Qwen2 / 2.5 / 3, Llama 3 / 3.1):
//      encode: split out added tokens -> NFC? -> regex splits -> byte-level map -> BPE by rank
//      decode: id -> token text -> byte-level unmap -> lossy UTF-8 (U+FFFD per invalid subpart)
//  - SentencePiece-style BPE (Llama 2, Mistral, Gemma 3):
//      encode: split out added tokens -> Prepend "▁" / Replace " " -> "▁" (or Metaspace) ->
//              BPE over characters, <0xNN> byte tokens for characters not in the vocab
//      decode: Replace "▁" -> " ", ByteFallback, Fuse, Strip the leading space
// Supported tokenizer.json: model BPE; normalizer NFC, Prepend, Replace, Sequence or null;
// pre_tokenizer Split (any behavior), ByteLevel, Metaspace, Sequence or null; decoder
// ByteLevel, Metaspace, or a Sequence of Replace / ByteFallback / Fuse / Strip (decoder.h);
// post_processor TemplateProcessing, ByteLevel, Sequence or null. truncation and padding are
// ignored, as transformers' fast tokenizers reset them on every call.
// Anything else is a nanovllm::Error naming the file and the field.
// All methods are const and thread-safe (encode shares a mutex-guarded pre-token cache).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/decoder.h"

namespace nanovllm {

struct TokenizerImpl;

class Tokenizer {
 public:
  // Loads a tokenizer.json; `source` names the input in error messages.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(std::string_view json_text, const std::string& source = "<tokenizer json>");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of UTF-8 `text` (Error if it is not valid UTF-8). No BOS/EOS is added.
  // parse_special = true: every added token in the text becomes its id (HF's default).
  // parse_special = false: text that spells a *special* added token is encoded as plain
  // text, while non-special added tokens (Qwen's <tool_call>, <think>, ...) are still split
  // out. This is HF's `encode_special_tokens = true` (transformers' split_special_tokens).
  // max_ids: stop once more than max_ids ids are made (a caller that refuses longer prompts
  // need not encode all of a huge text); the result then has more than max_ids ids, a prefix of
  // some length of the full encoding.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true,
                              size_t max_ids = SIZE_MAX) const;

  // HF's encode(text, add_special_tokens = true): encode() with the post-processor's template
  // around it (Llama 3's <|begin_of_text|>, Llama 2's <s>; nothing for Qwen). What engines do
  // with a raw text prompt (vLLM, nano-vllm); chat prompts are rendered with the BOS in the
  // text and encoded by encode(). max_ids caps the text's ids as in encode().
  std::vector<int32_t> encode_with_special_tokens(std::string_view text, bool parse_special = true,
                                                  size_t max_ids = SIZE_MAX) const;
  // The ids that template puts before / after the text.
  const std::vector<int32_t>& prefix_special_ids() const;
  const std::vector<int32_t>& suffix_special_ids() const;

  // Text of `ids`. Unknown ids are skipped (as HF does); skip_special_tokens drops special
  // added tokens. Bytes that are not valid UTF-8 become U+FFFD, one per maximal invalid
  // subpart (Rust's String::from_utf8_lossy).
  // SentencePiece-style decoders: a run of <0xNN> tokens that is not valid UTF-8 as a whole
  // becomes one U+FFFD per byte (HF's ByteFallback).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // One step of decode(): feeds `id` to `state` (made from decoder_config()), appending the
  // text it completed. decode() is these steps and state.finish().
  void decode_step(DecodeState& state, int32_t id, bool skip_special_tokens, std::string& out) const;
  const DecoderConfig& decoder_config() const;

  // Bytes a token contributes on its own (byte-level: its unmapped bytes; SentencePiece-style:
  // its text with "▁" as " ", a <0xNN> token its byte), or nullptr for an unknown id.
  // skip_special_tokens: nullptr for special tokens too.
  const std::string* token_bytes(int32_t id, bool skip_special_tokens = false) const;

  // Token text as the vocab writes it (byte-level form, e.g. "Ġworld"; "▁world"), or added token
  // content; -1 / "" when unknown.
  int32_t token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;

  // Max id + 1 over the vocab and the added tokens (151669 for Qwen3).
  int32_t vocab_size() const;
  // True for added tokens marked special.
  bool is_special(int32_t id) const;
  // The added tokens, in file order.
  const std::vector<AddedToken>& added_tokens() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

}  // namespace nanovllm
