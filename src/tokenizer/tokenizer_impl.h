#pragma once
// Internal state of a Tokenizer, shared by tokenizer.cpp (encode/decode) and
// tokenizer_loader*.cpp (tokenizer.json parsing).
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenize.h"

namespace nanovllm {

struct TokenizerImpl {
  std::string source;                     // file name for messages
  std::vector<NormalizerStep> normalizer;  // empty: none
  std::vector<PreTokenizeStep> pre_tokenize_steps;
  std::unique_ptr<Bpe> bpe;
  DecoderConfig decoder;
  // The post-processor's template for one sequence (HF's add_special_tokens = true):
  // these ids before and after it (Llama: BOS before; Qwen: nothing).
  std::vector<int32_t> prefix_special_ids, suffix_special_ids;

  std::vector<AddedToken> added_tokens;  // file order
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unique_ptr<AddedTokenMatcher> raw_matcher;         // normalized = false tokens
  std::unique_ptr<AddedTokenMatcher> normalized_matcher;  // normalized = true tokens

  // Indexed by id, [vocab_size]:
  enum Kind : uint8_t { kUnknown = 0, kModel = 1, kAdded = 2, kSpecial = 3 };
  std::vector<uint8_t> kind;
  std::vector<std::string> token_text;   // vocab / added token text (normalized tokens: normalized)
  std::vector<std::string> token_bytes;  // the token's decoded piece (DecodeState::add's `piece`)
  std::vector<int16_t> fallback_byte;    // the byte of a <0xNN> token under ByteFallback, else -1
};

}  // namespace nanovllm
