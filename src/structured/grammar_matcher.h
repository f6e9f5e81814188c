#pragma once
// The per-sequence state of structured generation: which tokens may come next, and the
// accepted ones. One per sequence; copy it to fork a sequence (n > 1).
//
//   auto g = compile_grammar({GrammarSpec::Kind::kJsonSchema, schema_text});
//   GrammarMatcher m(g, vocab);                  // vocab: one TokenVocabulary per model
//   int n = m.fill_next_token_bitmask(words);    // then mask logits, sample t
//   m.accept_token(t);                           // ... until m.is_terminated()
//
// A token's bytes may span several terminals and rules, and may end inside a UTF-8 code point:
// the matcher works on bytes. Masks are cached per (grammar, vocabulary) by parser state, so a
// state seen before (by any sequence) costs a hash lookup and a copy. A new state takes the
// tokens decided by the top of its stacks alone (cached per top, mask_cache.h; a new top walks
// the vocabulary's byte trie, milliseconds) and checks the few that depend on what lies below.
// Not thread-safe (one sequence, one thread at a time); distinct matchers may run on
// distinct threads concurrently.
// Errors: every method that advances or masks throws nanovllm::Error naming max_parse_stacks if
// the grammar is too ambiguous at this point (stack_arena.h); nothing else throws.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/stack_arena.h"
#include "structured/token_vocabulary.h"

namespace nanovllm::structured {

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                 std::shared_ptr<const TokenVocabulary> vocab);

  // bitmask: [vocab.num_bitmask_words()] = ceil(V / 32) uint32 words, overwritten; bit (t % 32)
  // of word t / 32 set = token t allowed. EOS ids are allowed only where the grammar may end.
  // Returns the number of allowed tokens: 0 after an EOS was accepted, else > 0 whenever the
  // vocabulary can spell every byte (a byte-level BPE vocabulary can): a live parse can always
  // be completed.
  int fill_next_token_bitmask(uint32_t* bitmask);
  // Advances by token `id`; false (state unchanged) if `id` is not allowed (out of range,
  // padding, special, bytes the grammar refuses, EOS where the grammar may not end, anything
  // after an EOS).
  bool accept_token(int32_t id);
  // Advances by raw bytes (e.g. a forced prefix); false (state unchanged) if refused.
  bool accept_bytes(std::string_view bytes);
  // Whether accept_bytes(bytes) would succeed, feeding the bytes one by one to the byte-level
  // parser (no mask, no cache): the definition masks are tested against. State unchanged.
  bool can_accept_bytes(std::string_view bytes);
  // An EOS was accepted, or the grammar can accept nothing more.
  bool is_terminated() const;
  // The bytes so far are a complete sentence.
  bool can_end() const;
  // Back to the start of a sentence.
  void reset();

  const TokenVocabulary& vocab() const { return *vocab_; }

 private:
  int compute_mask(uint32_t* bitmask);  // the mask of a state not in the cache
  uint32_t local_cut() const;           // the frame below the local part, or kNoParent

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::shared_ptr<MaskCache> cache_;
  StackArena arena_;
  uint32_t set_;
  bool eos_accepted_ = false;
  std::vector<uint32_t> key_;        // scratch: the state's key (StackArena::hash_key)
  std::vector<uint32_t> local_key_;  // scratch: the local part's key (StackArena::serialize)
  std::vector<uint32_t> scratch_;    // scratch of the trie walks
};

}  // namespace nanovllm::structured
