#include "structured/grammar_matcher.h"

#include <cstring>

#include "structured/token_mask.h"
#include "util/check.h"

namespace nanovllm::structured {

namespace {
// Past this many interned entries (~10 MB) the matcher's arena is rebuilt around its current
// state: the memo of trie walks is what grows.
constexpr size_t kCompactEntries = size_t(1) << 18;
// Frames below the stacks' common ancestor that the local part keeps: more context decides more
// tokens locally, fewer states share a local mask.
constexpr int kExtraLocalFrames = 2;
}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      cache_(grammar_->mask_cache(vocab_)),
      arena_(grammar_->grammar_ptr(), grammar_->limits()),
      set_(arena_.initial_set()) {}

void GrammarMatcher::reset() {
  set_ = arena_.initial_set();
  eos_accepted_ = false;
}

int GrammarMatcher::fill_next_token_bitmask(uint32_t* bitmask) {
  const size_t num_words = size_t(vocab_->num_bitmask_words());
  if (eos_accepted_) {
    std::memset(bitmask, 0, num_words * sizeof(uint32_t));
    return 0;
  }
  arena_.hash_key(set_, key_);
  if (std::shared_ptr<const CachedMask> m = cache_->full.find(key_)) {
    m->unpack(bitmask, num_words);
    return m->count;
  }
  const int count = compute_mask(bitmask);
  cache_->full.insert(key_, CachedMask::pack(bitmask, num_words, count));
  if (arena_.num_entries() > kCompactEntries) set_ = arena_.compact(set_);
  return count;
}

uint32_t GrammarMatcher::local_cut() const {
  // The deepest frame every stack passes through (their common ancestor), then one frame
  // below it per kExtraLocalFrames: the stacks above the cut are the local part.
  uint32_t common = StackArena::kNoParent;
  for (uint32_t f : arena_.frames(set_)) {
    if (f == StackArena::kAccept) return StackArena::kNoParent;  // the root may end: no frame below
    if (common == StackArena::kNoParent) {
      common = f;
      continue;
    }
    uint32_t a = common, b = f;
    while (arena_.frame(a).depth > arena_.frame(b).depth) a = arena_.frame(a).parent;
    while (arena_.frame(b).depth > arena_.frame(a).depth) b = arena_.frame(b).parent;
    while (a != b) {
      a = arena_.frame(a).parent;
      b = arena_.frame(b).parent;
      if (a == StackArena::kNoParent) return StackArena::kNoParent;
    }
    common = a;
  }
  uint32_t cut = common;
  for (int i = 0; i <= kExtraLocalFrames && cut != StackArena::kNoParent; ++i)
    cut = arena_.frame(cut).parent;
  return cut;
}

int GrammarMatcher::compute_mask(uint32_t* bitmask) {
  const uint32_t cut = arena_.can_continue(set_) ? local_cut() : StackArena::kNoParent;
  if (cut == StackArena::kNoParent)
    return exact_token_mask(arena_, set_, *vocab_, bitmask, scratch_);
  arena_.serialize(set_, local_key_, cut);
  std::shared_ptr<const LocalMask> local = cache_->local.find(local_key_);
  if (!local) {
    const uint32_t local_set = arena_.make_set(arena_.stacks(set_, cut), StackArena::kHole, false);
    auto made = std::make_shared<LocalMask>(local_token_mask(arena_, local_set, *vocab_, scratch_));
    local = made;
    cache_->local.insert(local_key_, std::move(made));
  }
  // Near max_stack_depth the local walk's verdicts may not hold below the cut: walk exactly.
  if (arena_.frame(cut).depth + local->max_reach > grammar_->limits().max_stack_depth) {
    return exact_token_mask(arena_, set_, *vocab_, bitmask, scratch_);
  }
  std::memcpy(bitmask, local->accepted.data(), local->accepted.size() * sizeof(uint32_t));
  return local->num_accepted +
         check_tokens(arena_, set_, *vocab_, local->uncertain, bitmask, scratch_);
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (eos_accepted_ || id < 0 || id >= vocab_->vocab_size()) return false;
  if (vocab_->is_eos(id)) {
    if (!arena_.can_end(set_)) return false;
    eos_accepted_ = true;
    return true;
  }
  const std::string_view bytes = vocab_->token_bytes(id);
  return !bytes.empty() && accept_bytes(bytes);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (eos_accepted_) return false;
  uint32_t s = set_;
  for (char c : bytes) {
    s = arena_.advance(s, uint8_t(c));
    if (s == StackArena::kDeadSet) return false;
  }
  set_ = s;
  if (arena_.num_entries() > kCompactEntries) set_ = arena_.compact(set_);
  return true;
}

bool GrammarMatcher::can_accept_bytes(std::string_view bytes) {
  if (eos_accepted_) return false;
  uint32_t s = set_;
  for (char c : bytes) {
    s = arena_.advance(s, uint8_t(c));
    if (s == StackArena::kDeadSet) return false;
  }
  return true;
}

bool GrammarMatcher::is_terminated() const { return eos_accepted_ || !arena_.can_continue(set_); }

bool GrammarMatcher::can_end() const { return !eos_accepted_ && arena_.can_end(set_); }

}  // namespace nanovllm::structured
