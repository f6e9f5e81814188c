#include "structured/token_vocabulary.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "util/check.h"

namespace nanovllm::structured {

namespace {

std::vector<std::string> tokenizer_bytes(const Tokenizer& tok, int32_t vocab_size) {
  if (vocab_size < tok.vocab_size()) {
    fail("vocab_size {} is smaller than the tokenizer's vocabulary ({})", vocab_size,
         tok.vocab_size());
  }
  std::vector<std::string> out(size_t(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id)) continue;  // never allowed (EOS is handled apart)
    if (const std::string* b = tok.token_bytes(id)) out[size_t(id)] = *b;
  }
  return out;
}

}  // namespace

TokenVocabulary::TokenVocabulary(const Tokenizer& tokenizer, int32_t vocab_size,
                                 std::vector<int32_t> eos_ids)
    : TokenVocabulary(tokenizer_bytes(tokenizer, vocab_size), vocab_size, std::move(eos_ids)) {}

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, int32_t vocab_size,
                                 std::vector<int32_t> eos_ids)
    : vocab_size_(vocab_size), eos_ids_(std::move(eos_ids)) {
  if (vocab_size <= 0 || size_t(vocab_size) < token_bytes.size()) {
    fail("vocab_size {} is not positive or smaller than the {} tokens given", vocab_size,
         token_bytes.size());
  }
  if (eos_ids_.empty()) fail("a token vocabulary needs at least one EOS id");
  is_eos_.assign(size_t(vocab_size), false);
  for (int32_t id : eos_ids_) {
    if (id < 0 || id >= vocab_size)
      fail("EOS id {} is outside the vocabulary [0, {})", id, vocab_size);
    is_eos_[size_t(id)] = true;
  }
  token_bytes.resize(size_t(vocab_size));
  for (int32_t id : eos_ids_) token_bytes[size_t(id)].clear();
  build(std::move(token_bytes));
}

void TokenVocabulary::build(std::vector<std::string> token_bytes) {
  offsets_.resize(token_bytes.size() + 1);
  offsets_[0] = 0;
  for (size_t t = 0; t < token_bytes.size(); ++t) {
    bytes_ += token_bytes[t];
    offsets_[t + 1] = uint32_t(bytes_.size());
    if (!token_bytes[t].empty()) sorted_ids_.push_back(int32_t(t));
    max_token_bytes_ = std::max(max_token_bytes_, uint32_t(token_bytes[t].size()));
  }
  std::sort(sorted_ids_.begin(), sorted_ids_.end(), [&](int32_t a, int32_t b) {
    return token_bytes[size_t(a)] < token_bytes[size_t(b)] ||
           (token_bytes[size_t(a)] == token_bytes[size_t(b)] && a < b);
  });
  // Preorder nodes: token i adds one node per byte past its common prefix with token i - 1;
  // a node's subtree ends where a later token first diverges above its depth.
  std::vector<uint32_t> open;  // open[d - 1]: the node of depth d on the current path
  std::string_view prev;
  for (size_t i = 0; i < sorted_ids_.size(); ++i) {
    const std::string& t = token_bytes[size_t(sorted_ids_[i])];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < t.size() && prev[lcp] == t[lcp]) ++lcp;
    while (open.size() > lcp) {  // close the nodes the new token leaves
      trie_[open.back()].subtree_end = uint32_t(trie_.size());
      open.pop_back();
    }
    if (t.size() > 0xFFFF) fail("token {} has more than 65535 bytes", sorted_ids_[i]);
    for (size_t d = lcp; d < t.size(); ++d) {
      open.push_back(uint32_t(trie_.size()));
      trie_.push_back({0, uint32_t(i), 0, uint16_t(d + 1), uint8_t(t[d])});
    }
    ++trie_[open.back()].num_tokens;  // t ends at the deepest open node (equal tokens share it)
    prev = t;
  }
  for (uint32_t n : open) trie_[n].subtree_end = uint32_t(trie_.size());
}

bool TokenVocabulary::is_eos(int32_t id) const {
  return id >= 0 && id < vocab_size_ && is_eos_[size_t(id)];
}

std::string_view TokenVocabulary::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return std::string_view(bytes_).substr(offsets_[size_t(id)],
                                         offsets_[size_t(id) + 1] - offsets_[size_t(id)]);
}

}  // namespace nanovllm::structured
