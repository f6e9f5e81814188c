#pragma once
// Internal state of a Tokenizer, shared by tokenizer.cpp (encode/decode) and
// tokenizer_loader.cpp (tokenizer.json parsing).
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

namespace nanovllm {

struct TokenizerImpl {
  std::string source;  // file name for messages
  bool nfc = false;    // normalizer NFC (else none)
  std::vector<PreTokenizeStep> pre_tokenize_steps;
  std::unique_ptr<Bpe> bpe;

  std::vector<AddedToken> added_tokens;  // file order
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unique_ptr<AddedTokenMatcher> raw_matcher;         // normalized = false tokens
  std::unique_ptr<AddedTokenMatcher> normalized_matcher;  // normalized = true tokens

  // Indexed by id, [vocab_size]:
  enum Kind : uint8_t { kUnknown = 0, kModel = 1, kAdded = 2, kSpecial = 3 };
  std::vector<uint8_t> kind;
  std::vector<std::string> token_text;   // vocab / added token text
  std::vector<std::string> token_bytes;  // what decode emits for the id before UTF-8 repair
};

}  // namespace nanovllm
