#pragma once
// BlockManager: paged KV-cache blocks with a prefix cache (nano-vllm's engine/block_manager.py).
//
// Prefix cache rules:
//  - Only full blocks are hashed: xxh64 (seed 0) over the previous block's hash as 8 little-endian
//    bytes (absent for a sequence's first block), then the block's token ids as int64 little-endian.
//  - A block is published in the cache (hash, token_ids, hash_to_block_id entry) only once its KV
//    is computed: cache_blocks() after a step (a prefill chunk, or the decode token that fills the
//    block). allocate() and may_append() never publish, so a block whose KV is not computed yet
//    (a prompt being prefilled, a step that failed) is never matched.
//  - A hit must match the stored token ids AND the stored chain: each published block remembers the
//    publication id of the block before it, so even a hash collision (forced in tests through the
//    injectable hash function) never reuses a block computed under another prefix.
//  - A freed block keeps its hash and tokens and is revived from the free list on a hit, until it is
//    handed out again for other tokens.
//  - At least one prompt token is always computed: only full blocks that end before the last token
//    are looked up, so num_cached_tokens <= num_tokens - 1 and a shared block is never written.
//    (A fully cached prompt whose length is a multiple of block_size recomputes its last block.)
//  - The free list is FIFO (nano-vllm's deque): freed blocks go to the back, new blocks come from the
//    front, a sequence's blocks are freed last-first. Allocation order is deterministic.
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/sequence.h"

namespace nanovllm {

struct Block {
  int32_t block_id = 0;
  int ref_count = 0;                // sequences whose block_table holds this block
  std::optional<uint64_t> hash;     // set while the block is published in the prefix cache
  std::vector<int32_t> token_ids;   // [block_size] the tokens hashed into `hash` (empty if none)
  uint64_t cache_id = 0;            // unique id of this publication, 0 = not published
  uint64_t prev_cache_id = 0;       // cache_id of the previous block in the chain, 0 = first block
};

// hash(prefix hash of the previous block or none, the block's token ids).
using BlockHashFn = std::function<uint64_t(std::optional<uint64_t>, std::span<const int32_t>)>;

class BlockManager {
 public:
  // hash_fn: the block hash; tests inject one that collides. Default: compute_hash.
  // sliding_window > 0: every layer attends within that many keys, so decode frees the blocks
  // that slid out of the window (free_slid_out_blocks).
  BlockManager(int num_blocks, int block_size, bool enable_prefix_caching,
               BlockHashFn hash_fn = nullptr, int sliding_window = 0);

  // xxh64, seed 0, over [prefix as 8 LE bytes] + token_ids as int64 LE.
  static uint64_t compute_hash(std::optional<uint64_t> prefix, std::span<const int32_t> token_ids);

  // Prefill: enough free blocks for seq's uncached blocks? (seq holds no blocks.)
  bool can_allocate(const Sequence& seq) const;
  // Fills seq.block_table with blocks for all seq.num_tokens() tokens, cached prefix first, and sets
  // seq.num_cached_tokens. Precondition: can_allocate(seq).
  void allocate(Sequence& seq);
  // Releases seq's blocks (last first); clears block_table and num_cached_tokens.
  void deallocate(Sequence& seq);

  // Decode: seq.num_tokens() counts the token computed this step; a block for it must exist.
  bool can_append(const Sequence& seq) const;
  // Adds a block when that token starts one (publishes nothing: the token is not computed yet).
  void may_append(Sequence& seq);
  // Under a sliding window W, before a decode step: frees seq's blocks whose every key lies below
  // the window of the token computed this step (keys < num_tokens() - W), so that no later query
  // reads them, but the last computed full block (cache_blocks chains the next one's hash to it).
  // Their block_table entries become -1; a freed block stays published for other prefixes.
  void free_slid_out_blocks(Sequence& seq);
  // Publishes every full block within seq's first seq.num_cached_tokens tokens not published yet
  // (call once a step's KV is computed). No-op without prefix caching.
  void cache_blocks(Sequence& seq);

  int num_blocks() const { return int(blocks_.size()); }
  int block_size() const { return block_size_; }
  bool enable_prefix_caching() const { return enable_prefix_caching_; }
  int num_free_blocks() const { return int(free_block_ids_.size()); }
  const Block& block(int32_t block_id) const;
  int ref_count(int32_t block_id) const { return block(block_id).ref_count; }
  std::optional<uint64_t> block_hash(int32_t block_id) const { return block(block_id).hash; }
  // The block published under `hash`, or -1.
  int32_t hash_to_block_id(uint64_t hash) const;
  // Prefix cache statistics over all allocate() calls: tokens looked up, tokens found cached.
  int64_t num_prefix_queries() const { return num_prefix_queries_; }
  int64_t num_prefix_hits() const { return num_prefix_hits_; }

 private:
  // Blocks of seq's longest verified cached prefix, in order.
  std::vector<int32_t> find_cached_blocks(const Sequence& seq) const;
  // Takes block_id off the free list (ref_count 1). forget: drop its cached content first.
  void allocate_block(int32_t block_id, bool forget);
  void deallocate_block(int32_t block_id);
  void publish(Block& block, std::optional<uint64_t> prefix, uint64_t prev_cache_id,
               std::span<const int32_t> token_ids);
  void unpublish(Block& block);

  int block_size_;
  bool enable_prefix_caching_;
  int sliding_window_;
  BlockHashFn hash_fn_;
  std::vector<Block> blocks_;
  std::unordered_map<uint64_t, int32_t> hash_to_block_id_;
  std::list<int32_t> free_block_ids_;                      // FIFO
  std::vector<std::list<int32_t>::iterator> free_pos_;     // [num_blocks] position in the free list
  std::unordered_set<int32_t> used_block_ids_;
  uint64_t next_cache_id_ = 1;
  int64_t num_prefix_queries_ = 0;
  int64_t num_prefix_hits_ = 0;
};

}  // namespace nanovllm
