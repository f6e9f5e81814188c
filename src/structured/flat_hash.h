#pragma once
// Open-addressing hash tables keyed by 64-bit integers, for the parser's hot loops (interned
// frames, memoized transitions, visited sets): one probe sequence over a flat array, no nodes.
#include <cstdint>
#include <vector>

namespace nanovllm::structured {

inline uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// uint64 key -> uint32 value. The key UINT64_MAX is reserved (never stored).
class FlatMap64 {
 public:
  static constexpr uint64_t kEmpty = UINT64_MAX;

  // The value of `key`, or nullptr.
  const uint32_t* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  // Inserts key -> value unless present; returns the stored value.
  uint32_t insert(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return values_[i];
      if (keys_[i] == kEmpty) {
        keys_[i] = key;
        values_[i] = value;
        ++size_;
        return value;
      }
    }
  }
  size_t size() const { return size_; }
  size_t bytes() const { return keys_.size() * (sizeof(uint64_t) + sizeof(uint32_t)); }

 private:
  void grow() {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<uint32_t> old_values = std::move(values_);
    const size_t cap = old_keys.empty() ? 64 : old_keys.size() * 2;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, 0);
    mask_ = cap - 1;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] != kEmpty) insert(old_keys[i], old_values[i]);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;
  size_t mask_ = 0, size_ = 0;
};

// A set of uint64 keys with O(1) clear (slots are stamped with a generation).
class FlatSet64 {
 public:
  void clear() {
    if (++generation_ == 0) {  // wrapped: forget every stamp
      stamps_.assign(stamps_.size(), 0);
      generation_ = 1;
    }
    size_ = 0;
  }
  // True if `key` was not in the set (and is now).
  bool insert(uint64_t key) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      if (stamps_[i] != generation_) {
        stamps_[i] = generation_;
        keys_[i] = key;
        ++size_;
        return true;
      }
      if (keys_[i] == key) return false;
    }
  }

 private:
  void grow() {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<uint32_t> old_stamps = std::move(stamps_);
    const uint32_t old_gen = generation_;
    const size_t cap = old_keys.empty() ? 64 : old_keys.size() * 2;
    keys_.assign(cap, 0);
    stamps_.assign(cap, 0);
    mask_ = cap - 1;
    size_ = 0;
    generation_ = 1;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_stamps[i] == old_gen) insert(old_keys[i]);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> stamps_;
  uint32_t generation_ = 1;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace nanovllm::structured
