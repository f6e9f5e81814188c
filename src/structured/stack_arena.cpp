#include "structured/stack_arena.h"

#include <algorithm>

#include "util/check.h"

namespace nanovllm::structured {

StackArena::StackArena(std::shared_ptr<const Grammar> grammar, const GrammarLimits& limits)
    : grammar_(std::move(grammar)),
      elements_(grammar_->elements.data()),
      rest_need_(grammar_->rest_need.data()),
      max_stack_depth_(limits.max_stack_depth),
      max_parse_stacks_(limits.max_parse_stacks) {
  frames_.push_back({0, kNoParent, 0, 0, {0, 0}});  // kAccept
  frames_.push_back({0, kNoParent, 0, 0, {0, 0}});  // kPopped
  set_offsets_ = {0, 0};                            // kDeadSet: no frames
  set_hashes_ = {0};
  set_reach_ = {0};
  set_uses_ = {0};
  set_row_ = {kInvalid};
  set_table_.assign(64, kInvalid);
}

uint32_t StackArena::intern_frame(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t(pos) << 32) | parent;
  if (const uint32_t* id = frame_index_.find(key)) return *id;
  const uint32_t depth = parent >= kHole ? 1 : frames_[parent].depth + 1;
  // Chain hashes: two different mixes of (the parent's hash, this position); the bottoms
  // kNoParent and kHole seed them differently.
  const uint64_t h0 = parent >= kHole ? parent : frames_[parent].hash[0];
  const uint64_t h1 = parent >= kHole ? ~uint64_t(parent) : frames_[parent].hash[1];
  const uint32_t reach =
      std::max(depth + rest_need_[pos], parent >= kHole ? 0 : frames_[parent].reach);
  Frame f{pos, parent, depth, reach, {mix64(h0 * 0x9e3779b97f4a7c15ull + pos), 0}};
  uint64_t x = (h1 ^ (uint64_t(pos) << 17)) + 0xc2b2ae3d27d4eb4full;  // murmur3's finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  f.hash[1] = x ^ (x >> 33);
  const uint32_t id = uint32_t(frames_.size());
  frames_.push_back(f);
  frame_index_.insert(key, id);
  return id;
}

uint32_t StackArena::intern_set(std::vector<uint32_t>& frames) {
  std::sort(frames.begin(), frames.end());
  frames.erase(std::unique(frames.begin(), frames.end()), frames.end());
  if (frames.empty()) return kDeadSet;
  if (frames.size() > max_parse_stacks_) {
    fail(
        "grammar limit max_parse_stacks ({}) exceeded: the grammar is too ambiguous ({} parse "
        "stacks at once)",
        max_parse_stacks_, frames.size());
  }
  uint64_t h = frames.size();
  for (uint32_t f : frames) h = mix64(h ^ f);
  const size_t mask = set_table_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const uint32_t s = set_table_[i];
    if (s == kInvalid) break;
    const std::span<const uint32_t> have = this->frames(s);
    if (set_hashes_[s] == h && have.size() == frames.size() &&
        std::equal(frames.begin(), frames.end(), have.begin())) {
      return s;
    }
  }
  const uint32_t id = uint32_t(set_hashes_.size());
  set_data_.insert(set_data_.end(), frames.begin(), frames.end());
  set_offsets_.push_back(uint32_t(set_data_.size()));
  set_hashes_.push_back(h);
  uint32_t reach = 0;
  for (uint32_t f : frames) reach = std::max(reach, frames_[f].reach);
  set_reach_.push_back(reach);
  set_uses_.push_back(0);
  set_row_.push_back(kInvalid);
  auto place = [&](uint32_t s) {
    const size_t m = set_table_.size() - 1;
    for (size_t i = set_hashes_[s] & m;; i = (i + 1) & m) {
      if (set_table_[i] == kInvalid) {
        set_table_[i] = s;
        return;
      }
    }
  };
  if (set_hashes_.size() * 2 > set_table_.size()) {  // grow: rehash every set but kDeadSet
    set_table_.assign(set_table_.size() * 2, kInvalid);
    for (uint32_t s = 1; s <= id; ++s) place(s);
  } else {
    place(id);
  }
  return id;
}

void StackArena::expand(uint32_t pos, uint32_t parent) {
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    const auto [p, par] = work_.back();
    work_.pop_back();
    if (!visited_.insert((uint64_t(p) << 32) | par)) continue;
    const Element e = elements_[p];
    switch (e.kind) {
      case ElementKind::kByteSet: {  // kept only if it can be finished within the limit
        const uint32_t depth = par >= kHole ? 1 : frames_[par].depth + 1;
        const uint32_t reach =
            std::max(depth + rest_need_[p], par >= kHole ? 0 : frames_[par].reach);
        if (reach <= max_stack_depth_) scratch_.push_back(intern_frame(p, par));
        break;
      }
      case ElementKind::kEnd:
        if (par == kNoParent) {
          scratch_.push_back(kAccept);
        } else if (par == kHole) {
          scratch_.push_back(kPopped);
        } else {
          work_.emplace_back(frames_[par].pos, frames_[par].parent);
        }
        break;
      case ElementKind::kRuleRef: {
        uint32_t callee_parent = par;  // a tail call returns straight to par
        if (elements_[p + 1].kind != ElementKind::kEnd) callee_parent = intern_frame(p + 1, par);
        for (uint32_t alt : grammar_->rules[e.value].alternatives)
          work_.emplace_back(alt, callee_parent);
        break;
      }
    }
  }
}

uint32_t StackArena::initial_set() {
  scratch_.clear();
  visited_.clear();
  expand(Grammar::kStart, kNoParent);
  return intern_set(scratch_);
}

uint32_t StackArena::compute_advance(uint32_t set, uint8_t byte) {
  scratch_.clear();
  visited_.clear();
  const std::vector<ByteSet>& byte_sets = grammar_->byte_sets;
  for (const uint32_t f : frames(set)) {
    if (f <= kPopped) continue;
    const Frame fr = frames_[f];
    if (byte_sets[elements_[fr.pos].value].contains(byte)) expand(fr.pos + 1, fr.parent);
  }
  return intern_set(scratch_);
}

uint32_t StackArena::advance(uint32_t set, uint8_t byte) {
  const uint32_t row = set_row_[set];
  if (row != kInvalid) {
    uint32_t& to = rows_[size_t(row) * 256 + byte];  // compute_advance never resizes rows_
    if (to == kUnknown) to = compute_advance(set, byte);
    return to;
  }
  const uint64_t key = (uint64_t(set) << 8) | byte;
  if (const uint32_t* to = transitions_.find(key)) {
    if (++set_uses_[set] == kHotUses) {  // hot: give it a dense row, seeded from the memo
      set_row_[set] = uint32_t(rows_.size() / 256);
      rows_.resize(rows_.size() + 256, kUnknown);
      uint32_t* r = rows_.data() + size_t(set_row_[set]) * 256;
      for (int b = 0; b < 256; ++b) {
        if (const uint32_t* t = transitions_.find((uint64_t(set) << 8) | uint64_t(b))) r[b] = *t;
      }
    }
    return *to;
  }
  const uint32_t to = compute_advance(set, byte);
  transitions_.insert(key, to);
  return to;
}

uint32_t StackArena::make_set(const std::vector<std::vector<uint32_t>>& stacks, uint32_t bottom,
                              bool accept) {
  std::vector<uint32_t> frames;
  if (accept) frames.push_back(kAccept);
  for (const std::vector<uint32_t>& s : stacks) {
    uint32_t parent = bottom;
    for (uint32_t pos : s) parent = intern_frame(pos, parent);
    if (!s.empty() && frames_[parent].reach <= max_stack_depth_) frames.push_back(parent);
  }
  return intern_set(frames);
}

bool StackArena::can_end(uint32_t set) const {
  const std::span<const uint32_t> f = frames(set);
  return !f.empty() && f[0] == kAccept;
}

bool StackArena::has_popped(uint32_t set) const {
  for (uint32_t f : frames(set)) {
    if (f == kPopped) return true;
    if (f > kPopped) break;
  }
  return false;
}

bool StackArena::can_continue(uint32_t set) const {
  const std::span<const uint32_t> f = frames(set);
  return !f.empty() && f.back() > kPopped;
}

std::vector<std::vector<uint32_t>> StackArena::stacks(uint32_t set, uint32_t cut) const {
  std::vector<std::vector<uint32_t>> out;
  for (uint32_t f : frames(set)) {
    if (f <= kPopped) continue;
    std::vector<uint32_t> s;
    for (uint32_t id = f; id != cut; id = frames_[id].parent) {
      NV_CHECK(id < kHole, "stack does not pass through the cut frame");
      s.push_back(frames_[id].pos);
    }
    std::reverse(s.begin(), s.end());
    out.push_back(std::move(s));
  }
  return out;
}

void StackArena::serialize(uint32_t set, std::vector<uint32_t>& out, uint32_t cut) const {
  out.clear();
  out.push_back(can_end(set) ? 1 : 0);
  out.push_back(0);
  // Stacks are written in an arena-independent order: sorted by their position lists.
  std::vector<std::vector<uint32_t>>& stacks = serialize_scratch_;
  size_t n = 0;
  for (uint32_t f : frames(set)) {
    if (f <= kPopped) continue;
    if (stacks.size() <= n) stacks.emplace_back();
    std::vector<uint32_t>& s = stacks[n++];
    s.clear();
    for (uint32_t id = f; id != cut; id = frames_[id].parent) {
      NV_CHECK(id < kHole, "stack does not pass through the cut frame");
      s.push_back(frames_[id].pos);
    }
  }
  std::sort(stacks.begin(), stacks.begin() + ptrdiff_t(n));
  out[1] = uint32_t(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(uint32_t(stacks[i].size()));
    out.insert(out.end(), stacks[i].begin(), stacks[i].end());
  }
}

void StackArena::hash_key(uint32_t set, std::vector<uint32_t>& out) const {
  std::vector<std::pair<uint64_t, uint64_t>>& hashes = hash_scratch_;
  hashes.clear();
  for (uint32_t f : frames(set)) {
    if (f > kPopped) hashes.emplace_back(frames_[f].hash[0], frames_[f].hash[1]);
  }
  std::sort(hashes.begin(), hashes.end());
  out.clear();
  out.push_back(can_end(set) ? 1 : 0);
  out.push_back(uint32_t(hashes.size()));
  for (const auto& [h0, h1] : hashes) {
    out.insert(out.end(), {uint32_t(h0 >> 32), uint32_t(h0), uint32_t(h1 >> 32), uint32_t(h1)});
  }
}

uint32_t StackArena::compact(uint32_t set) {
  NV_CHECK(!has_popped(set), "compacting a local set");
  const std::vector<std::vector<uint32_t>> live = stacks(set);
  GrammarLimits limits;
  limits.max_stack_depth = max_stack_depth_;
  limits.max_parse_stacks = max_parse_stacks_;
  StackArena fresh(grammar_, limits);
  const uint32_t id = fresh.make_set(live, kNoParent, can_end(set));
  *this = std::move(fresh);
  return id;
}

}  // namespace nanovllm::structured
