#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "util/check.h"

namespace nanovllm {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t hash_key(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return key;
}

}  // namespace

Bpe::Bpe(BpeConfig config, const std::string& where) : config_(std::move(config)) {
  const auto& vocab = config_.vocab;
  size_t capacity = 16;
  while (capacity < config_.merges.size() * 2) capacity *= 2;
  merges_.assign(capacity, MergeEntry{});
  merge_mask_ = capacity - 1;
  for (size_t rank = 0; rank < config_.merges.size(); ++rank) {
    const auto& [a, b] = config_.merges[rank];
    const auto ia = vocab.find(a);
    const auto ib = vocab.find(b);
    const auto iab = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end()) {
      const std::string& missing = ia == vocab.end() ? a : ib == vocab.end() ? b : a + b;
      fail("{}: model.merges[{}] (\"{} {}\") uses token \"{}\" that is not in model.vocab", where,
           rank, a, b, missing);
    }
    // A repeated merge keeps its last rank, as Hugging Face's map building does.
    insert_merge(pair_key(ia->second, ib->second), static_cast<int32_t>(rank), iab->second);
  }
  config_.merges.clear();
  config_.merges.shrink_to_fit();

  if (config_.unk_token) {
    const auto it = vocab.find(*config_.unk_token);
    if (it == vocab.end()) fail("{}: model.unk_token \"{}\" is not in model.vocab", where, *config_.unk_token);
    unk_id_ = it->second;
  }
  const ByteLevel& bl = ByteLevel::get();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, bl.to_char(static_cast<uint8_t>(b)));
    const auto it = config_.byte_level ? vocab.find(s) : vocab.end();
    byte_id_[b] = it == vocab.end() ? -1 : it->second;
    const auto fallback = vocab.find(fmt::format("<0x{:02X}>", b));
    fallback_id_[b] = fallback == vocab.end() ? -1 : fallback->second;
  }
  if (!config_.byte_level) {
    for (const auto& [token, id] : vocab) {
      size_t pos = 0;
      if (token.empty() || utf8::find_invalid(token) != std::string::npos) continue;
      const char32_t c = utf8::next(token, pos);
      if (pos == token.size()) char_id_.emplace(c, id);
    }
  }
}

void Bpe::insert_merge(uint64_t key, int32_t rank, int32_t new_id) {
  for (uint64_t i = hash_key(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    MergeEntry& e = merges_[i];
    if (e.key == kEmpty || e.key == key) {
      e = MergeEntry{key, rank, new_id};
      return;
    }
  }
}

const Bpe::MergeEntry* Bpe::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = hash_key(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeEntry& e = merges_[i];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

// One symbol per byte-level character (one per byte). A character missing from the vocab
// becomes <0xXX> byte tokens (byte_fallback, all present), else the unk token (consecutive
// ones fused with fuse_unk), else it is dropped; the same order of rules as Hugging Face.
void Bpe::initial_symbols(std::string_view bytes, std::vector<int32_t>& ids) const {
  int32_t pending_unk = -1;  // an unk not yet emitted (so that fuse_unk can extend it)
  for (char ch : bytes) {
    const uint8_t b = static_cast<uint8_t>(ch);
    if (byte_id_[b] >= 0) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(byte_id_[b]);
      continue;
    }
    if (config_.byte_fallback) {
      // The fallback spells the UTF-8 bytes of the byte-level character.
      std::string c;
      utf8::append(c, ByteLevel::get().to_char(b));
      std::vector<int32_t> fallback;
      for (char cb : c) {
        if (fallback_id_[static_cast<uint8_t>(cb)] < 0) break;
        fallback.push_back(fallback_id_[static_cast<uint8_t>(cb)]);
      }
      if (fallback.size() == c.size()) {
        ids.insert(ids.end(), fallback.begin(), fallback.end());
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !config_.fuse_unk) ids.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
}

// One symbol per code point of valid UTF-8 `text`, with the same rules for characters
// missing from the vocab as above (byte_fallback spells the character's own UTF-8 bytes).
// As in Hugging Face, an unk waiting to be fused is emitted only at the next character found
// in the vocab (or at the end), so it follows any byte-fallback tokens in between.
void Bpe::initial_char_symbols(std::string_view text, std::vector<int32_t>& ids) const {
  int32_t pending_unk = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t begin = pos;
    const char32_t c = utf8::next(text, pos);
    if (const auto it = char_id_.find(c); it != char_id_.end()) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(it->second);
      continue;
    }
    if (config_.byte_fallback) {
      bool all_present = true;
      for (size_t i = begin; i < pos; ++i) all_present = all_present && fallback_id_[static_cast<uint8_t>(text[i])] >= 0;
      if (all_present) {
        for (size_t i = begin; i < pos; ++i) ids.push_back(fallback_id_[static_cast<uint8_t>(text[i])]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !config_.fuse_unk) ids.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
}

void Bpe::merge(std::vector<int32_t>& ids) const {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  // Doubly linked list over ids; a merged-away symbol gets id -1.
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, left, right;
    // Min-heap on (rank, pos) through std::push_heap's max-heap.
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Candidate> heap;
  heap.reserve(n);
  const auto push = [&](int32_t pos) {
    const int32_t r = next[pos];
    if (r < 0) return;
    if (const MergeEntry* m = find_merge(ids[pos], ids[r])) {
      heap.push_back({m->rank, pos, ids[pos], ids[r]});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    const int32_t r = next[c.pos];
    // Stale when either side has changed since the candidate was pushed.
    if (ids[c.pos] != c.left || r < 0 || ids[r] != c.right) continue;
    ids[c.pos] = find_merge(c.left, c.right)->new_id;
    ids[r] = -1;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  ids.erase(std::remove(ids.begin(), ids.end(), -1), ids.end());
}

void Bpe::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (config_.ignore_merges) {
    const auto it = config_.vocab.find(config_.byte_level ? ByteLevel::get().encode(bytes) : std::string(bytes));
    if (it != config_.vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (config_.byte_level && bytes.size() == 1 && byte_id_[static_cast<uint8_t>(bytes[0])] >= 0) {
    out.push_back(byte_id_[static_cast<uint8_t>(bytes[0])]);
    return;
  }
  const bool cacheable = bytes.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(std::string(bytes));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(bytes.size());
  if (config_.byte_level) {
    initial_symbols(bytes, ids);
  } else {
    initial_char_symbols(bytes, ids);
  }
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(bytes), std::move(ids));
  }
}

}  // namespace nanovllm
