#pragma once
// The byte-level parser: a nondeterministic pushdown recognizer of a Grammar, whose state is a
// set of parse stacks. A stack is a chain of frames; a frame is (position, parent): its top
// frame's position is a kByteSet element (the byte expected next), the frames below it hold
// return positions (the element after a rule reference). Frames and sets of frames are interned,
// so equal states have equal ids within one arena, and transitions (set, byte) -> set are
// memoized (a lazily built DFA: over a token trie the walk mostly hits the memo; the states it
// meets often get a dense 256-entry row).
//
// A reference in tail position pushes no frame (so x* and right recursion run in constant
// stack). A stack that could not be finished within limits.max_stack_depth frames (its reach,
// from Grammar::rest_need) is dropped up front: a dead path, never an error, and never a dead
// end, since every stack kept can be finished (JSON nested deeper than the limit is refused).
// Return frames pushed and popped within one byte's expansion are not limited (the grammar
// bounds them). A set of more than limits.max_parse_stacks stacks (a grammar too ambiguous)
// throws an Error naming the limit.
//
// Besides real stacks (bottom: kNoParent), a set may hold local stacks whose bottom is kHole, a
// stand-in for frames not known (token_mask.h's context-independent masks): popping past it
// yields the marker frame kPopped, as ending the root yields kAccept.
// Not thread-safe; copyable (a GrammarMatcher copies its arena).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "structured/flat_hash.h"
#include "structured/grammar.h"
#include "structured/grammar_limits.h"

namespace nanovllm::structured {

class StackArena {
 public:
  static constexpr uint32_t kDeadSet = 0;            // the empty set: no parse is alive
  static constexpr uint32_t kAccept = 0;             // frame id: the root rule has ended
  static constexpr uint32_t kPopped = 1;             // frame id: a local stack popped past kHole
  static constexpr uint32_t kNoParent = UINT32_MAX;  // parent of a real stack's bottom frame
  static constexpr uint32_t kHole = UINT32_MAX - 1;  // parent of a local stack's bottom frame

  struct Frame {
    uint32_t pos;     // a position in Grammar::elements
    uint32_t parent;  // a frame id, kNoParent or kHole
    uint32_t depth;   // frames in the chain down to kNoParent / kHole, this one included
    uint32_t
        reach;  // the depth the chain needs to finish: max over its frames of depth + rest_need
    uint64_t hash[2];  // two independent hashes of the chain's positions (and its bottom)
  };

  StackArena(std::shared_ptr<const Grammar> grammar, const GrammarLimits& limits);

  // The set at the start of a sentence.
  uint32_t initial_set();
  // The set after `byte` from `set` (kDeadSet if no stack accepts it). Memoized.
  uint32_t advance(uint32_t set, uint8_t byte);
  // The set of these stacks (positions from the bottom up, each ending at a kByteSet element)
  // over `bottom` (kNoParent or kHole), plus kAccept if `accept`. Throws like advance().
  uint32_t make_set(const std::vector<std::vector<uint32_t>>& stacks, uint32_t bottom, bool accept);

  // The sentence so far is complete (the set holds kAccept).
  bool can_end(uint32_t set) const;
  // Some stack expects more bytes (a frame other than kAccept / kPopped).
  bool can_continue(uint32_t set) const;
  bool has_popped(uint32_t set) const;
  std::span<const uint32_t> frames(uint32_t set) const {
    return {set_data_.data() + set_offsets_[set], set_data_.data() + set_offsets_[set + 1]};
  }
  const Frame& frame(uint32_t id) const { return frames_[id]; }
  // The largest reach of the stacks of `set` (0 for markers only).
  uint32_t reach(uint32_t set) const { return set_reach_[set]; }

  // The canonical form of `set`, equal for equal states of any two arenas of one grammar:
  // [can_end, num_stacks, then per stack (sorted): length, positions from the top down to (not
  // including) frame `cut`] (cut = kNoParent: whole stacks). Every stack must pass through cut.
  // O(frames of the stacks).
  void serialize(uint32_t set, std::vector<uint32_t>& out, uint32_t cut = kNoParent) const;
  // A key of `set` in O(stacks): [can_end, num_stacks, the 128-bit chain hash of each stack,
  // sorted]. Equal states give equal keys in any arena; unequal states collide with probability
  // ~2^-128 per pair.
  void hash_key(uint32_t set, std::vector<uint32_t>& out) const;
  // The stacks of `set` as positions from the bottom up, above frame `cut` (see serialize).
  std::vector<std::vector<uint32_t>> stacks(uint32_t set, uint32_t cut = kNoParent) const;

  // Entries held (frames + sets + memoized transitions), to decide when to compact().
  size_t num_entries() const {
    return frames_.size() + set_offsets_.size() + transitions_.size() + rows_.size() / 8;
  }
  // Rebuilds the arena with `set` alone (memo dropped); returns the set's new id.
  uint32_t compact(uint32_t set);

 private:
  static constexpr uint32_t kInvalid = UINT32_MAX;
  static constexpr uint32_t kUnknown = UINT32_MAX;  // a dense row entry not computed yet
  static constexpr uint32_t kHotUses = 32;  // advances from a set before it gets a dense row

  uint32_t intern_frame(uint32_t pos, uint32_t parent);
  uint32_t intern_set(std::vector<uint32_t>& frames);  // sorts and dedupes `frames`
  // Adds to scratch_ the frames (and markers) reachable from (pos, parent) before a byte:
  // expands references and pops ends.
  void expand(uint32_t pos, uint32_t parent);
  uint32_t compute_advance(uint32_t set, uint8_t byte);

  std::shared_ptr<const Grammar> grammar_;
  const Element* elements_;    // grammar_->elements
  const uint32_t* rest_need_;  // grammar_->rest_need
  uint32_t max_stack_depth_;
  uint32_t max_parse_stacks_;
  std::vector<Frame> frames_;       // frames_[kAccept], frames_[kPopped] are markers
  FlatMap64 frame_index_;           // pos << 32 | parent -> frame id
  std::vector<uint32_t> set_data_;  // the frame ids of every set, sorted within each set
  std::vector<uint32_t>
      set_offsets_;                   // [num_sets + 1] set s is set_data_[offsets[s], offsets[s+1])
  std::vector<uint64_t> set_hashes_;  // [num_sets]
  std::vector<uint32_t> set_table_;   // open addressing over set ids (kInvalid: empty slot)
  std::vector<uint32_t> set_reach_;   // [num_sets] reach(set)
  std::vector<uint32_t> set_uses_;    // [num_sets] advances computed from the set
  std::vector<uint32_t> set_row_;     // [num_sets] its dense row in rows_, or kInvalid
  std::vector<uint32_t> rows_;        // [num_rows * 256] dense transitions (kUnknown: not yet)
  FlatMap64 transitions_;             // set << 8 | byte -> set, for sets without a row
  // Scratch of advance(), kept to reuse its memory.
  std::vector<uint32_t> scratch_;
  std::vector<std::pair<uint32_t, uint32_t>> work_;
  FlatSet64 visited_;
  mutable std::vector<std::vector<uint32_t>> serialize_scratch_;
  mutable std::vector<std::pair<uint64_t, uint64_t>> hash_scratch_;
};

}  // namespace nanovllm::structured
