#pragma once
// The BPE model: a pre-token starts as one symbol per character and adjacent pairs are
// merged, lowest merge rank first (leftmost first among equal ranks), until no adjacent pair
// has a merge. O(n log n) per pre-token: a binary heap of candidate pairs over a doubly
// linked list of symbols. Two alphabets:
//  - byte-level (GPT-2, Qwen, Llama 3): the pre-token's raw bytes, each seen as its
//    byte-level character (one symbol per byte);
//  - characters (SentencePiece-style: Llama 2, Mistral, Gemma): the pre-token's code points;
//    one missing from the vocab becomes its UTF-8 bytes as <0xNN> tokens (byte_fallback),
//    else the unk token.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nanovllm {

struct BpeConfig {
  std::unordered_map<std::string, int32_t> vocab;          // token (byte-level form) -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;  // unknown characters become <0xXX> tokens when all exist
  bool ignore_merges = false;  // a pre-token that is itself in the vocab is one token
  bool byte_level = true;      // the alphabet (see above)
};

class Bpe {
 public:
  // Throws Error naming `where` (file and field) for merges over unknown tokens, or a
  // missing unk token.
  Bpe(BpeConfig config, const std::string& where);

  // Appends the ids of one pre-token: raw bytes (byte-level alphabet: the model sees them
  // byte-level mapped) or valid UTF-8 (characters). Thread-safe; results of short pre-tokens
  // are cached.
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return config_.vocab; }

 private:
  struct MergeEntry {
    uint64_t key = kEmpty;  // (left id << 32) | right id
    int32_t rank = 0;
    int32_t new_id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void insert_merge(uint64_t key, int32_t rank, int32_t new_id);
  const MergeEntry* find_merge(int32_t left, int32_t right) const;
  void initial_symbols(std::string_view bytes, std::vector<int32_t>& ids) const;
  void initial_char_symbols(std::string_view text, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;

  BpeConfig config_;
  std::optional<int32_t> unk_id_;
  int32_t byte_id_[256];  // byte-level: id of each byte's one-character token, -1 when absent
  int32_t fallback_id_[256];  // id of each byte's <0xNN> token, -1 when absent
  std::unordered_map<char32_t, int32_t> char_id_;  // characters: one-character tokens
  // Open-addressing hash table of merges, linear probing, capacity a power of two.
  std::vector<MergeEntry> merges_;
  uint64_t merge_mask_ = 0;

  static constexpr size_t kCacheMaxPieceBytes = 64;
  static constexpr size_t kCacheCapacity = 1 << 16;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace nanovllm
