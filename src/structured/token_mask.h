#pragma once
// Token masks of parser states by walking the vocabulary's byte trie: depth first, one
// memoized transition per trie edge, a dead prefix skipping its subtree.
//   - exact_token_mask: the tokens a state accepts (the definition, used when nothing cached
//     applies);
//   - local_token_mask: for a local state (stacks over StackArena::kHole, the unknown frames
//     below a cut), the tokens accepted without popping past the hole, whatever lies below
//     ("context-independent", as xgrammar calls them), and the uncertain ones, whose bytes pop
//     past the hole (or that end exactly there) before being decided;
//   - check_tokens: the exact verdict on a list of tokens (the uncertain ones, in a real state).
#include <cstdint>
#include <vector>

#include "structured/mask_cache.h"
#include "structured/stack_arena.h"
#include "structured/token_vocabulary.h"

namespace nanovllm::structured {

// Overwrites bitmask ([vocab.num_bitmask_words()] uint32; bit t % 32 of word t / 32 = token t)
// with the tokens whose bytes `arena` can consume from `set`, plus the EOS ids if the set can
// end. Returns the number of bits set. `scratch` is reused memory.
int exact_token_mask(StackArena& arena, uint32_t set, const TokenVocabulary& vocab,
                     uint32_t* bitmask, std::vector<uint32_t>& scratch);

// Precondition: `local_set` holds stacks over kHole only (no markers).
LocalMask local_token_mask(StackArena& arena, uint32_t local_set, const TokenVocabulary& vocab,
                           std::vector<uint32_t>& scratch);

// Sets in bitmask the bits of the tokens among `sorted` (ascending sorted indices) that `set`
// accepts; returns how many bits it set that were clear.
int check_tokens(StackArena& arena, uint32_t set, const TokenVocabulary& vocab,
                 const std::vector<int32_t>& sorted, uint32_t* bitmask,
                 std::vector<uint32_t>& scratch);

}  // namespace nanovllm::structured
