#pragma once
// A Hugging Face tokenizer.json of the byte-level BPE family (GPT-2, Qwen2, Qwen2.5, Qwen3),
// encoding and decoding byte for byte as the `tokenizers` library does:
//   encode: split out added tokens -> NFC -> regex split -> byte-level map -> BPE by rank
//   decode: id -> token text -> byte-level unmap -> lossy UTF-8 (U+FFFD per invalid subpart)
// Supported tokenizer.json: model BPE; normalizer NFC or null; pre_tokenizer ByteLevel or a
// Sequence of Split(regex or string, "Isolated") steps ending in ByteLevel; decoder
// ByteLevel. post_processor ByteLevel/null (Qwen adds no BOS, so nothing is added).
// Anything else is a nanovllm::Error naming the file and the field.
// All methods are const and thread-safe (encode shares a mutex-guarded pre-token cache).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocab.h"

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

  // Text of `ids`. Unknown ids are skipped (as HF does); skip_special_tokens drops special
  // added tokens. Bytes that are not valid UTF-8 become U+FFFD, one per maximal invalid
  // subpart (Rust's String::from_utf8_lossy).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // Raw bytes a token contributes to decode's byte stream, or nullptr for an unknown id.
  // skip_special_tokens: nullptr for special tokens too.
  const std::string* token_bytes(int32_t id, bool skip_special_tokens = false) const;

  // Token text as the vocab writes it (byte-level form, e.g. "Ġworld"), or added token
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
