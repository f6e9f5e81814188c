#include "structured/token_mask.h"

#include <algorithm>
#include <cstring>

namespace nanovllm::structured {

namespace {

bool set_bit(uint32_t* bitmask, int32_t id) {
  uint32_t& w = bitmask[id >> 5];
  const uint32_t bit = 1u << (id & 31);
  const bool was_clear = !(w & bit);
  w |= bit;
  return was_clear;
}

}  // namespace

int exact_token_mask(StackArena& arena, uint32_t set, const TokenVocabulary& vocab,
                     uint32_t* bitmask, std::vector<uint32_t>& states) {
  std::memset(bitmask, 0, sizeof(uint32_t) * size_t(vocab.num_bitmask_words()));
  int count = 0;
  if (arena.can_end(set)) {
    for (int32_t id : vocab.eos_ids()) count += set_bit(bitmask, id);
  }
  if (!arena.can_continue(set)) return count;
  // states[d]: the set after the first d bytes of the current node's prefix.
  states.assign(vocab.max_token_bytes() + 1, StackArena::kDeadSet);
  states[0] = set;
  const std::vector<TokenVocabulary::TrieNode>& trie = vocab.trie();
  const uint32_t n = uint32_t(trie.size());
  for (uint32_t i = 0; i < n;) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const uint32_t s = arena.advance(states[node.depth - 1u], node.byte);
    if (s == StackArena::kDeadSet) {
      i = node.subtree_end;
      continue;
    }
    states[node.depth] = s;
    for (uint32_t k = 0; k < node.num_tokens; ++k)
      count += set_bit(bitmask, vocab.sorted_id(int32_t(node.first_token + k)));
    ++i;
  }
  return count;
}

LocalMask local_token_mask(StackArena& arena, uint32_t local_set, const TokenVocabulary& vocab,
                           std::vector<uint32_t>& states) {
  LocalMask out;
  out.accepted.assign(size_t(vocab.num_bitmask_words()), 0);
  out.max_reach = arena.reach(local_set);
  states.assign(vocab.max_token_bytes() + 1, StackArena::kDeadSet);
  std::vector<uint8_t> popped(vocab.max_token_bytes() + 1,
                              0);  // popped[d]: some set on the path held kPopped
  states[0] = local_set;
  const std::vector<TokenVocabulary::TrieNode>& trie = vocab.trie();
  const uint32_t n = uint32_t(trie.size());
  for (uint32_t i = 0; i < n;) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const uint32_t d = node.depth;
    const uint32_t s = arena.advance(states[d - 1], node.byte);
    if (s == StackArena::kDeadSet) {
      if (popped[d - 1]) {  // the frames below the hole may still take these bytes
        for (uint32_t k = node.first_token; k < vocab.subtree_tokens_end(i); ++k)
          out.uncertain.push_back(int32_t(k));
      }
      i = node.subtree_end;
      continue;
    }
    states[d] = s;
    popped[d] = popped[d - 1] || arena.has_popped(s);
    out.max_reach = std::max(out.max_reach, arena.reach(s));
    const bool accepted = arena.can_continue(s) || arena.can_end(s);
    for (uint32_t k = 0; k < node.num_tokens; ++k) {
      const int32_t sorted = int32_t(node.first_token + k);
      if (accepted) {
        out.num_accepted += set_bit(out.accepted.data(), vocab.sorted_id(sorted));
      } else {  // only kPopped: the token ends exactly where the cut frame resumes
        out.uncertain.push_back(sorted);
      }
    }
    ++i;
  }
  return out;
}

int check_tokens(StackArena& arena, uint32_t set, const TokenVocabulary& vocab,
                 const std::vector<int32_t>& sorted, uint32_t* bitmask,
                 std::vector<uint32_t>& states) {
  int count = 0;
  states.assign(vocab.max_token_bytes() + 1, StackArena::kDeadSet);
  states[0] = set;
  uint32_t valid = 0;  // states[0..valid] hold for the previous token's prefix
  std::string_view prev;
  for (int32_t idx : sorted) {
    const std::string_view bytes = vocab.sorted_bytes(idx);
    uint32_t lcp = 0;
    while (lcp < valid && lcp < bytes.size() && prev[lcp] == bytes[lcp]) ++lcp;
    uint32_t d = lcp;
    while (d < bytes.size()) {
      const uint32_t next = arena.advance(states[d], uint8_t(bytes[d]));
      if (next == StackArena::kDeadSet) break;
      states[++d] = next;
    }
    valid = d;
    prev = bytes;
    if (d == bytes.size()) count += set_bit(bitmask, vocab.sorted_id(idx));
  }
  return count;
}

}  // namespace nanovllm::structured
