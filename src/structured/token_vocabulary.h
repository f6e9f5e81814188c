#pragma once
// What the matcher needs to know of a model's vocabulary, built once per model: each token's
// bytes, the EOS ids, the tokens sorted by bytes, and their byte trie laid out in preorder
// (walked depth-first by token_mask.h, a dead prefix skipping its subtree in one step).
// Immutable, thread-safe.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm {
class Tokenizer;
}

namespace nanovllm::structured {

class TokenVocabulary {
 public:
  // From a tokenizer: token t contributes tokenizer.token_bytes(t). vocab_size is the model's V
  // (>= tokenizer.vocab_size(); ids past the tokenizer's are padding). Never allowed by a mask:
  // padding ids, special tokens other than the EOS ids, tokens with no bytes. Added tokens that
  // are not special (Qwen's <think>, <tool_call>) count by their text, like any token.
  // eos_ids: each in [0, vocab_size) (Error naming the id otherwise), at least one. Errors also
  // for vocab_size below the tokenizer's.
  TokenVocabulary(const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> eos_ids);
  // From raw bytes: token t contributes token_bytes[t] (empty: never allowed); ids from
  // token_bytes.size() to vocab_size are padding. EOS ids' bytes are ignored.
  TokenVocabulary(std::vector<std::string> token_bytes, int32_t vocab_size,
                  std::vector<int32_t> eos_ids);

  int32_t vocab_size() const { return vocab_size_; }
  // Words of a token bitmask: ceil(vocab_size / 32).
  int32_t num_bitmask_words() const { return (vocab_size_ + 31) / 32; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_eos(int32_t id) const;
  // The bytes token `id` contributes; empty for EOS, padding, special and unknown ids.
  std::string_view token_bytes(int32_t id) const;

  // The tokens with bytes (EOS excluded), sorted by bytes ("sorted index" i).
  int32_t num_sorted() const { return int32_t(sorted_ids_.size()); }
  int32_t sorted_id(int32_t i) const { return sorted_ids_[size_t(i)]; }
  std::string_view sorted_bytes(int32_t i) const { return token_bytes(sorted_ids_[size_t(i)]); }
  uint32_t max_token_bytes() const { return max_token_bytes_; }

  // The byte trie in preorder, root excluded: node n is the prefix of its tokens of length
  // depth; its subtree is nodes [n, subtree_end); the tokens spelled exactly by it are sorted
  // indices [first_token, first_token + num_tokens), those of its subtree [first_token,
  // nodes[subtree_end].first_token) (num_sorted() past the last node).
  struct TrieNode {
    uint32_t subtree_end;
    uint32_t first_token;
    uint16_t num_tokens;
    uint16_t depth;  // >= 1
    uint8_t byte;    // the last byte of the prefix
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  // The first sorted index past node n's subtree.
  uint32_t subtree_tokens_end(uint32_t n) const {
    const uint32_t e = trie_[n].subtree_end;
    return e < trie_.size() ? trie_[e].first_token : uint32_t(sorted_ids_.size());
  }

 private:
  void build(std::vector<std::string> token_bytes);

  int32_t vocab_size_;
  std::vector<int32_t> eos_ids_;
  std::vector<bool> is_eos_;       // [vocab_size]
  std::string bytes_;              // every token's bytes, by id
  std::vector<uint32_t> offsets_;  // [vocab_size + 1] token t is bytes_[offsets[t], offsets[t+1])
  std::vector<int32_t> sorted_ids_;
  std::vector<TrieNode> trie_;
  uint32_t max_token_bytes_ = 0;
};

}  // namespace nanovllm::structured
