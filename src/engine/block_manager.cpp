#include "engine/block_manager.h"

#include <algorithm>
#include <utility>

#include <xxhash.h>

#include "util/check.h"

namespace nanovllm {

namespace {

void put_le64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(v >> (8 * i));
}

}  // namespace

BlockManager::BlockManager(int num_blocks, int block_size, bool enable_prefix_caching,
                           BlockHashFn hash_fn, int sliding_window)
    : block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      sliding_window_(sliding_window),
      hash_fn_(hash_fn ? std::move(hash_fn) : BlockHashFn(&BlockManager::compute_hash)) {
  if (num_blocks <= 0) fail("the KV cache needs at least one block, got num_blocks={}", num_blocks);
  if (block_size <= 0) fail("block_size must be positive, got {}", block_size);
  blocks_.resize(size_t(num_blocks));
  free_pos_.resize(size_t(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) {
    blocks_[size_t(i)].block_id = i;
    free_pos_[size_t(i)] = free_block_ids_.insert(free_block_ids_.end(), i);
  }
}

uint64_t BlockManager::compute_hash(std::optional<uint64_t> prefix,
                                    std::span<const int32_t> token_ids) {
  std::vector<uint8_t> bytes((prefix ? 8 : 0) + 8 * token_ids.size());
  uint8_t* p = bytes.data();
  if (prefix) {
    put_le64(p, *prefix);
    p += 8;
  }
  for (int32_t t : token_ids) {
    put_le64(p, uint64_t(int64_t(t)));  // int64, as numpy's default int array
    p += 8;
  }
  return XXH64(bytes.data(), bytes.size(), 0);
}

const Block& BlockManager::block(int32_t block_id) const {
  NV_CHECK(block_id >= 0 && block_id < num_blocks(), "block id {}", block_id);
  return blocks_[size_t(block_id)];
}

int32_t BlockManager::hash_to_block_id(uint64_t hash) const {
  auto it = hash_to_block_id_.find(hash);
  return it == hash_to_block_id_.end() ? -1 : it->second;
}

std::vector<int32_t> BlockManager::find_cached_blocks(const Sequence& seq) const {
  std::vector<int32_t> hits;
  if (!enable_prefix_caching_) return hits;
  // Only blocks that end before the last token: at least one token is computed. A sequence that
  // wants prompt logprobs computes every row it has not scored yet.
  int num_candidates = (seq.num_tokens() - 1) / block_size_;
  if (seq.needs_prompt_logprobs()) {
    num_candidates = std::min(num_candidates, int(seq.prompt_logprobs.size()) / block_size_);
  }
  std::optional<uint64_t> prefix;
  uint64_t prev_cache_id = 0;
  for (int i = 0; i < num_candidates; ++i) {
    std::span<const int32_t> tokens(seq.token_ids.data() + size_t(i) * block_size_,
                                    size_t(block_size_));
    uint64_t h = hash_fn_(prefix, tokens);
    int32_t id = hash_to_block_id(h);
    if (id < 0) break;
    const Block& b = blocks_[size_t(id)];
    bool same = b.hash == h && b.prev_cache_id == prev_cache_id &&
                std::equal(tokens.begin(), tokens.end(), b.token_ids.begin(), b.token_ids.end());
    if (!same) break;
    hits.push_back(id);
    prefix = h;
    prev_cache_id = b.cache_id;
  }
  return hits;
}

bool BlockManager::can_allocate(const Sequence& seq) const {
  std::vector<int32_t> hits = find_cached_blocks(seq);
  // Hits on blocks in use cost nothing; revived free blocks and new blocks come off the free list.
  int in_use = int(std::count_if(hits.begin(), hits.end(),
                                 [&](int32_t id) { return blocks_[size_t(id)].ref_count > 0; }));
  return num_free_blocks() >= seq.num_blocks() - in_use;
}

void BlockManager::allocate(Sequence& seq) {
  NV_CHECK(seq.block_table.empty(), "seq {} already holds blocks", seq.seq_id);
  NV_CHECK(can_allocate(seq), "seq {}: not enough free blocks", seq.seq_id);
  std::vector<int32_t> hits = find_cached_blocks(seq);
  for (int32_t id : hits) {
    Block& b = blocks_[size_t(id)];
    if (b.ref_count > 0) {
      ++b.ref_count;
    } else {
      allocate_block(id, /*forget=*/false);  // revive a freed block that still holds its tokens
    }
    seq.block_table.push_back(id);
  }
  for (int i = int(hits.size()); i < seq.num_blocks(); ++i) {
    int32_t id = free_block_ids_.front();
    allocate_block(id, /*forget=*/true);
    seq.block_table.push_back(id);
  }
  seq.num_cached_tokens = int(hits.size()) * block_size_;
  num_prefix_queries_ += seq.num_tokens();
  num_prefix_hits_ += seq.num_cached_tokens;
}

void BlockManager::deallocate(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    if (*it >= 0) deallocate_block(*it);  // -1: freed by free_slid_out_blocks
  }
  seq.block_table.clear();
  seq.num_cached_tokens = 0;
}

bool BlockManager::can_append(const Sequence& seq) const {
  bool needs_block = seq.num_blocks() > int(seq.block_table.size());
  return num_free_blocks() >= (needs_block ? 1 : 0);
}

void BlockManager::may_append(Sequence& seq) {
  if (seq.num_blocks() > int(seq.block_table.size())) {
    NV_CHECK(seq.num_blocks() == int(seq.block_table.size()) + 1, "seq {}: {} blocks, holds {}",
             seq.seq_id, seq.num_blocks(), seq.block_table.size());
    NV_CHECK(!free_block_ids_.empty(), "may_append without can_append");
    int32_t id = free_block_ids_.front();
    allocate_block(id, /*forget=*/true);
    seq.block_table.push_back(id);
  }
}

void BlockManager::free_slid_out_blocks(Sequence& seq) {
  if (sliding_window_ <= 0) return;
  const int first_key = seq.num_tokens() - sliding_window_;  // of the token computed next
  const int keep = seq.num_cached_tokens / block_size_ - 1;  // the last computed full block
  for (int b = 0; b < keep && (b + 1) * block_size_ <= first_key; ++b) {
    int32_t& id = seq.block_table[size_t(b)];
    if (id < 0) continue;
    deallocate_block(id);
    id = -1;
  }
}

void BlockManager::cache_blocks(Sequence& seq) {
  if (!enable_prefix_caching_) return;
  int num_full = std::min(seq.num_cached_tokens / block_size_, int(seq.block_table.size()));
  // Blocks are published in order: walk back to the last published one, then forward.
  int first = num_full;
  while (first > 0 && seq.block_table[size_t(first - 1)] >= 0 &&
         !blocks_[size_t(seq.block_table[size_t(first - 1)])].hash)
    --first;
  std::optional<uint64_t> prefix;
  uint64_t prev_cache_id = 0;
  if (first > 0) {
    NV_CHECK(seq.block_table[size_t(first - 1)] >= 0,
             "seq {}: block {} was freed before the next was published", seq.seq_id, first - 1);
    const Block& prev = blocks_[size_t(seq.block_table[size_t(first - 1)])];
    prefix = prev.hash;
    prev_cache_id = prev.cache_id;
  }
  for (int i = first; i < num_full; ++i) {
    Block& b = blocks_[size_t(seq.block_table[size_t(i)])];
    std::span<const int32_t> tokens(seq.token_ids.data() + size_t(i) * block_size_,
                                    size_t(block_size_));
    publish(b, prefix, prev_cache_id, tokens);
    prefix = b.hash;
    prev_cache_id = b.cache_id;
  }
}

void BlockManager::allocate_block(int32_t block_id, bool forget) {
  Block& b = blocks_[size_t(block_id)];
  NV_CHECK(b.ref_count == 0, "block {} is in use", block_id);
  if (forget) unpublish(b);
  free_block_ids_.erase(free_pos_[size_t(block_id)]);
  free_pos_[size_t(block_id)] = free_block_ids_.end();
  used_block_ids_.insert(block_id);
  b.ref_count = 1;
}

void BlockManager::deallocate_block(int32_t block_id) {
  Block& b = blocks_[size_t(block_id)];
  NV_CHECK(b.ref_count > 0, "block {} freed twice", block_id);
  if (--b.ref_count > 0) return;
  used_block_ids_.erase(block_id);
  free_pos_[size_t(block_id)] = free_block_ids_.insert(free_block_ids_.end(), block_id);
}

void BlockManager::publish(Block& block, std::optional<uint64_t> prefix, uint64_t prev_cache_id,
                           std::span<const int32_t> token_ids) {
  NV_CHECK(!block.hash, "block {} is published already", block.block_id);
  block.hash = hash_fn_(prefix, token_ids);
  block.token_ids.assign(token_ids.begin(), token_ids.end());
  block.cache_id = next_cache_id_++;
  block.prev_cache_id = prev_cache_id;
  hash_to_block_id_[*block.hash] = block.block_id;  // the newest copy wins
}

void BlockManager::unpublish(Block& block) {
  if (!block.hash) return;
  auto it = hash_to_block_id_.find(*block.hash);
  if (it != hash_to_block_id_.end() && it->second == block.block_id) hash_to_block_id_.erase(it);
  block.hash.reset();
  block.token_ids.clear();
  block.cache_id = 0;
  block.prev_cache_id = 0;
}

}  // namespace nanovllm
