#pragma once
// Token masks of one (grammar, vocabulary) pair, shared by every matcher of that pair:
//   - full masks keyed by a parser state (StackArena::hash_key): the fast path of
//     GrammarMatcher::fill_next_token_bitmask;
//   - local masks keyed by the top of a state (the stacks above a cut frame): the tokens
//     accepted whatever lies below the cut, and those that depend on it (token_mask.h).
// Each cache is bounded by bytes, least recently used evicted; thread-safe (readers share a
// lock).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "structured/flat_hash.h"

namespace nanovllm::structured {

// A token mask as stored: the bitmask words, or (when fewer than num_words / 2 tokens are
// allowed) the allowed ids alone.
struct CachedMask {
  std::vector<uint32_t> words;  // [num_bitmask_words] or empty when sparse
  std::vector<int32_t> ids;     // the allowed ids when sparse
  int count = 0;                // tokens allowed
  size_t bytes() const { return words.size() * sizeof(uint32_t) + ids.size() * sizeof(int32_t); }

  static std::shared_ptr<const CachedMask> pack(const uint32_t* bitmask, size_t num_words,
                                                int count);
  // Writes the mask into bitmask ([num_words]).
  void unpack(uint32_t* bitmask, size_t num_words) const;
};

struct LocalMask {
  std::vector<uint32_t> accepted;  // [num_bitmask_words] accepted without popping past the cut
  int num_accepted = 0;            // bits set in accepted
  std::vector<int32_t> uncertain;  // sorted indices, ascending: accepted or not by what lies below
  uint32_t max_reach = 0;  // the largest reach of a stack the walk met, counted from the cut
  size_t bytes() const {
    return accepted.size() * sizeof(uint32_t) + uncertain.size() * sizeof(int32_t);
  }
};

// Values of type T (with bytes()) keyed by a state's serialization.
template <typename T>
class KeyedCache {
 public:
  explicit KeyedCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  std::shared_ptr<const T> find(const std::vector<uint32_t>& key) const {
    std::shared_lock lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    it->second.last_use.store(clock_.fetch_add(1, std::memory_order_relaxed),
                              std::memory_order_relaxed);
    return it->second.value;
  }

  // Stores `value` under `key` unless present (then evicts the older half past max_bytes).
  void insert(const std::vector<uint32_t>& key, std::shared_ptr<const T> value) {
    const size_t need = entry_bytes(key, *value);
    if (need > max_bytes_) return;
    std::unique_lock lock(mu_);
    if (entries_.count(key)) return;
    if (bytes_ + need > max_bytes_) {
      std::vector<std::pair<uint64_t, const std::vector<uint32_t>*>> by_age;
      for (const auto& [k, e] : entries_)
        by_age.emplace_back(e.last_use.load(std::memory_order_relaxed), &k);
      std::sort(by_age.begin(), by_age.end());
      std::vector<std::vector<uint32_t>> victims;
      for (const auto& [age, k] : by_age) {
        if (bytes_ + need <= max_bytes_ / 2) break;
        bytes_ -= entry_bytes(*k, *entries_.at(*k).value);
        victims.push_back(*k);
      }
      for (const auto& k : victims) entries_.erase(k);
    }
    auto [it, inserted] = entries_.try_emplace(key);
    it->second.value = std::move(value);
    it->second.last_use.store(clock_.fetch_add(1, std::memory_order_relaxed),
                              std::memory_order_relaxed);
    bytes_ += need;
  }

  size_t size() const {
    std::shared_lock lock(mu_);
    return entries_.size();
  }

 private:
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& key) const {
      uint64_t h = key.size();
      for (uint32_t w : key) h = mix64(h ^ w);
      return size_t(h);
    }
  };
  struct Entry {
    std::shared_ptr<const T> value;
    mutable std::atomic<uint64_t> last_use{0};
  };
  static size_t entry_bytes(const std::vector<uint32_t>& key, const T& value) {
    return key.size() * sizeof(uint32_t) + value.bytes() + 128;  // + map node and bookkeeping
  }

  size_t max_bytes_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::vector<uint32_t>, Entry, KeyHash> entries_;
  size_t bytes_ = 0;
  mutable std::atomic<uint64_t> clock_{0};
};

// Both caches of one (grammar, vocabulary) pair; the byte budget is split between them.
struct MaskCache {
  explicit MaskCache(size_t max_bytes) : full(max_bytes / 2), local(max_bytes / 2) {}
  KeyedCache<CachedMask> full;
  KeyedCache<LocalMask> local;
};

}  // namespace nanovllm::structured
