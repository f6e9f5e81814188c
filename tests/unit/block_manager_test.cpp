// BlockManager: exact block ids, ref counts and prefix-cache hashing.
#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "util/check.h"

namespace nanovllm {
namespace {

// Expected hashes from an independent pure-Python xxh64 over nano-vllm's byte layout
// (prefix.to_bytes(8, "little") + np.array(token_ids).tobytes(), int64).
constexpr uint64_t kHash1234 = 0x73f859a04f669e6dull;          // [1, 2, 3, 4], no prefix
constexpr uint64_t kHash5678After1234 = 0x087884241753df3eull;  // [5, 6, 7, 8] after kHash1234
constexpr uint64_t kHashNeg = 0x4951865c74f952e5ull;            // [-1, 100000], no prefix

std::vector<int32_t> iota(int32_t first, int n) {
  std::vector<int32_t> v(size_t(n), 0);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class BlockManagerTest : public ::testing::Test {
 protected:
  void make(int num_blocks, int block_size = 4, bool prefix_caching = true,
            BlockHashFn hash_fn = nullptr) {
    bm = std::make_unique<BlockManager>(num_blocks, block_size, prefix_caching, std::move(hash_fn));
  }

  Sequence& seq(std::vector<int32_t> prompt) {
    seqs.push_back(std::make_unique<Sequence>(int64_t(seqs.size()), std::move(prompt),
                                              ResolvedSampling{}, bm->block_size()));
    return *seqs.back();
  }

  // Allocates s and "computes" its whole prompt, as the scheduler does after a prefill step.
  void prefill(Sequence& s) {
    ASSERT_TRUE(bm->can_allocate(s));
    bm->allocate(s);
    s.num_cached_tokens = s.num_tokens();
    bm->cache_blocks(s);
  }

  // One decode step: token sampled, then scheduled (may_append) and computed (cache_blocks, as
  // the scheduler's postprocess does).
  void decode(Sequence& s, int32_t token) {
    s.append_token(token);
    ASSERT_TRUE(bm->can_append(s));
    bm->may_append(s);
    ASSERT_EQ(int(s.block_table.size()), s.num_blocks());
    s.num_cached_tokens = s.num_tokens();
    bm->cache_blocks(s);
  }

  void release_all() {
    for (auto& s : seqs) bm->deallocate(*s);
  }

  // Every test ends with every block free and every ref count 0.
  void TearDown() override {
    if (!bm) return;
    for (auto& s : seqs) EXPECT_TRUE(s->block_table.empty()) << "seq " << s->seq_id;
    EXPECT_EQ(bm->num_free_blocks(), bm->num_blocks());
    for (int i = 0; i < bm->num_blocks(); ++i) EXPECT_EQ(bm->ref_count(i), 0) << "block " << i;
  }

  std::unique_ptr<BlockManager> bm;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

TEST_F(BlockManagerTest, ComputeHashMatchesNanoVllmLayout) {
  EXPECT_EQ(BlockManager::compute_hash(std::nullopt, iota(1, 4)), kHash1234);
  EXPECT_EQ(BlockManager::compute_hash(kHash1234, iota(5, 4)), kHash5678After1234);
  EXPECT_EQ(BlockManager::compute_hash(std::nullopt, std::vector<int32_t>{-1, 100000}), kHashNeg);
}

TEST_F(BlockManagerTest, FreshAllocationIsFifo) {
  make(6);
  Sequence& a = seq(iota(1, 9));  // 3 blocks
  prefill(a);
  EXPECT_EQ(a.block_table, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(a.num_cached_tokens, 9);
  EXPECT_EQ(bm->num_free_blocks(), 3);
  Sequence& b = seq(iota(100, 5));  // 2 blocks, no shared prefix
  prefill(b);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{3, 4}));
  bm->deallocate(a);  // freed last block first: free list is now [5, 2, 1, 0]
  EXPECT_TRUE(a.block_table.empty());
  EXPECT_EQ(a.num_cached_tokens, 0);
  Sequence& c = seq(iota(200, 12));  // 3 blocks from the front of the free list
  prefill(c);
  EXPECT_EQ(c.block_table, (std::vector<int32_t>{5, 2, 1}));
  release_all();
}

TEST_F(BlockManagerTest, TwoSequencesShareAPrefix) {
  make(8);
  Sequence& a = seq(iota(1, 10));  // [1..10]: two full blocks and a partial one
  prefill(a);
  EXPECT_EQ(a.block_table, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(bm->block_hash(0), kHash1234);
  EXPECT_EQ(bm->block_hash(1), kHash5678After1234);
  EXPECT_EQ(bm->block_hash(2), std::nullopt);  // partial blocks are never hashed
  EXPECT_EQ(bm->hash_to_block_id(kHash1234), 0);
  EXPECT_EQ(bm->hash_to_block_id(kHash5678After1234), 1);

  Sequence& b = seq(cat(iota(1, 8), {20, 21, 22}));
  ASSERT_TRUE(bm->can_allocate(b));
  bm->allocate(b);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(b.num_cached_tokens, 8);
  EXPECT_EQ(bm->ref_count(0), 2);
  EXPECT_EQ(bm->ref_count(1), 2);
  EXPECT_EQ(bm->ref_count(2), 1);
  EXPECT_EQ(bm->ref_count(3), 1);
  EXPECT_EQ(bm->num_free_blocks(), 4);

  bm->deallocate(a);
  EXPECT_EQ(bm->ref_count(0), 1);
  EXPECT_EQ(bm->ref_count(1), 1);
  EXPECT_EQ(bm->ref_count(2), 0);
  EXPECT_EQ(bm->num_free_blocks(), 5);
  bm->deallocate(b);  // free list: [4, 5, 6, 7, 2, 3, 1, 0]
  Sequence& c = seq(iota(90, 5));
  prefill(c);
  EXPECT_EQ(c.block_table, (std::vector<int32_t>{4, 5}));
  release_all();
}

TEST_F(BlockManagerTest, CanAllocateCountsOnlyBlocksNotInUse) {
  make(3);
  Sequence& a = seq(iota(1, 9));  // holds all 3 blocks
  prefill(a);
  Sequence& b = seq(cat(iota(1, 8), {77}));  // 2 hits in use + 1 new block
  EXPECT_FALSE(bm->can_allocate(b));
  bm->deallocate(a);
  // Now the hits are free (cached) blocks: 3 blocks off the free list, all there.
  ASSERT_TRUE(bm->can_allocate(b));
  bm->allocate(b);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(b.num_cached_tokens, 8);
  release_all();
}

TEST_F(BlockManagerTest, FreedCachedBlockIsRevivedUntilReused) {
  make(4);
  Sequence& a = seq(iota(1, 9));
  prefill(a);
  bm->deallocate(a);  // free list: [3, 2, 1, 0]; blocks 0 and 1 keep their hashes
  EXPECT_EQ(bm->num_free_blocks(), 4);
  EXPECT_EQ(bm->block_hash(0), kHash1234);
  EXPECT_EQ(bm->block_hash(1), kHash5678After1234);

  Sequence& b = seq(cat(iota(1, 8), {50}));
  ASSERT_TRUE(bm->can_allocate(b));
  bm->allocate(b);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, 3}));  // revived 0 and 1, new block 3
  EXPECT_EQ(b.num_cached_tokens, 8);
  EXPECT_EQ(bm->ref_count(0), 1);
  EXPECT_EQ(bm->ref_count(1), 1);
  EXPECT_EQ(bm->num_free_blocks(), 1);
  bm->deallocate(b);  // free list: [2, 3, 1, 0]

  Sequence& c = seq(iota(100, 16));  // takes every block: 1 and 0 forget their tokens
  prefill(c);
  EXPECT_EQ(c.block_table, (std::vector<int32_t>{2, 3, 1, 0}));
  EXPECT_EQ(bm->hash_to_block_id(kHash1234), -1);
  bm->deallocate(c);
  Sequence& d = seq(cat(iota(1, 8), {50}));
  bm->allocate(d);
  EXPECT_EQ(d.num_cached_tokens, 0);
  release_all();
}

TEST_F(BlockManagerTest, ConstantHashNeverReusesAWrongBlock) {
  make(6, 4, true, [](std::optional<uint64_t>, std::span<const int32_t>) { return uint64_t(7); });
  Sequence& a = seq(cat(iota(1, 4), {5}));
  prefill(a);
  EXPECT_EQ(bm->hash_to_block_id(7), 0);
  Sequence& b = seq(cat({9, 9, 9, 9}, {5}));  // same hash, other tokens
  bm->allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 0);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{2, 3}));
  Sequence& c = seq(cat(iota(1, 4), {6}));  // the real match still hits
  bm->allocate(c);
  EXPECT_EQ(c.num_cached_tokens, 4);
  EXPECT_EQ(c.block_table[0], 0);
  release_all();
}

TEST_F(BlockManagerTest, PrefixBlindHashNeverReusesABlockOfAnotherPrefix) {
  // A hash that ignores the prefix: equal blocks after different prefixes collide. Verifying the
  // tokens alone would hand d the block computed after [9, 9, 9, 9].
  make(12, 4, true, [](std::optional<uint64_t>, std::span<const int32_t> t) {
    return BlockManager::compute_hash(std::nullopt, t);
  });
  Sequence& a = seq(cat(iota(1, 8), {0}));                 // [1 2 3 4][5 6 7 8][0]
  prefill(a);                                               // blocks 0 1 2
  Sequence& c = seq(cat(cat({9, 9, 9, 9}, iota(5, 4)), {0}));  // [9 9 9 9][5 6 7 8][0]
  prefill(c);                                               // blocks 3 4 5; 4 wins [5 6 7 8]
  EXPECT_EQ(bm->hash_to_block_id(*bm->block_hash(4)), 4);
  Sequence& d = seq(cat(iota(1, 8), {1}));
  bm->allocate(d);
  EXPECT_EQ(d.num_cached_tokens, 4);
  EXPECT_EQ(d.block_table, (std::vector<int32_t>{0, 6, 7}));
  EXPECT_EQ(bm->ref_count(4), 1);
  release_all();
}

TEST_F(BlockManagerTest, FullyCachedPromptStillComputesItsLastToken) {
  make(8);
  Sequence& a = seq(iota(1, 8));  // exactly two full blocks
  prefill(a);
  EXPECT_EQ(bm->hash_to_block_id(kHash5678After1234), 1);
  Sequence& b = seq(iota(1, 8));  // the same prompt: the last block is not taken
  bm->allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 4);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(bm->ref_count(1), 1);
  b.num_cached_tokens = 8;
  bm->cache_blocks(b);  // b's copy is published; the newest copy wins the lookup
  EXPECT_EQ(bm->block_hash(2), kHash5678After1234);
  EXPECT_EQ(bm->hash_to_block_id(kHash5678After1234), 2);
  Sequence& c = seq(cat(iota(1, 8), {9}));  // both blocks end before the last token
  bm->allocate(c);
  EXPECT_EQ(c.num_cached_tokens, 8);
  EXPECT_EQ(c.block_table, (std::vector<int32_t>{0, 2, 3}));
  Sequence& d = seq(iota(1, 4));  // one full block: nothing is cached
  bm->allocate(d);
  EXPECT_EQ(d.num_cached_tokens, 0);
  EXPECT_EQ(d.block_table, (std::vector<int32_t>{4}));
  release_all();
}

TEST_F(BlockManagerTest, PartialPrefillPublishesOnlyComputedBlocks) {
  make(8);
  Sequence& a = seq(iota(1, 10));
  bm->allocate(a);
  a.num_cached_tokens = 6;  // a first chunk of 6 tokens: only block 0 is complete
  bm->cache_blocks(a);
  EXPECT_EQ(bm->block_hash(0), kHash1234);
  EXPECT_EQ(bm->block_hash(1), std::nullopt);
  Sequence& b = seq(iota(1, 10));
  bm->allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 4);
  a.num_cached_tokens = 10;
  bm->cache_blocks(a);
  EXPECT_EQ(bm->block_hash(1), kHash5678After1234);
  release_all();
}

TEST_F(BlockManagerTest, MayAppendHashesAtBlockBoundaries) {
  make(4);
  Sequence& a = seq({1, 2, 3});
  prefill(a);
  EXPECT_EQ(a.block_table, (std::vector<int32_t>{0}));
  EXPECT_EQ(bm->block_hash(0), std::nullopt);
  decode(a, 4);  // fills block 0
  EXPECT_EQ(a.block_table, (std::vector<int32_t>{0}));
  EXPECT_EQ(bm->block_hash(0), kHash1234);
  decode(a, 5);  // starts block 1
  EXPECT_EQ(a.block_table, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(bm->block_hash(1), std::nullopt);
  decode(a, 6);
  decode(a, 7);
  EXPECT_EQ(bm->block_hash(1), std::nullopt);
  EXPECT_EQ(bm->num_free_blocks(), 2);
  decode(a, 8);  // fills block 1: chained to block 0
  EXPECT_EQ(bm->block_hash(1), kHash5678After1234);
  EXPECT_EQ(a.block_table.size(), 2u);
  Sequence& b = seq(cat(iota(1, 8), {9}));  // decoded blocks are shared like prefilled ones
  bm->allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 8);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, 2}));
  release_all();
}

TEST_F(BlockManagerTest, CanAppendNeedsAFreeBlockOnlyAtABoundary) {
  make(1);
  Sequence& a = seq({1, 2, 3});
  prefill(a);
  a.append_token(4);
  EXPECT_TRUE(bm->can_append(a));  // block 0 still has room
  bm->may_append(a);
  a.num_cached_tokens = 4;
  a.append_token(5);
  EXPECT_FALSE(bm->can_append(a));
  release_all();
}

TEST_F(BlockManagerTest, BlockSizeOneHashesEveryToken) {
  make(4, 1);
  Sequence& a = seq({1, 2});
  prefill(a);
  EXPECT_TRUE(bm->block_hash(0).has_value());
  EXPECT_TRUE(bm->block_hash(1).has_value());
  decode(a, 3);
  EXPECT_EQ(a.block_table, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(bm->block_hash(2).has_value());
  Sequence& b = seq({1, 2, 3, 4});
  bm->allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 3);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, 2, 3}));
  release_all();
}

TEST_F(BlockManagerTest, WithoutPrefixCachingNothingIsHashedOrShared) {
  make(8, 4, false);
  Sequence& a = seq(iota(1, 9));
  prefill(a);
  decode(a, 10);
  decode(a, 11);
  decode(a, 12);
  for (int32_t id : a.block_table) EXPECT_EQ(bm->block_hash(id), std::nullopt);
  Sequence& b = seq(iota(1, 9));
  bm->allocate(b);
  EXPECT_EQ(b.num_cached_tokens, 0);
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{3, 4, 5}));
  release_all();
}

// Under a sliding window (every layer: Mistral) decode frees the blocks whose keys every later
// query skips, keeping the last computed full block (the next one's hash chains to it); the freed
// blocks stay published, so a later prompt with the same prefix still hits them; deallocate
// skips the freed entries and returns every block.
TEST_F(BlockManagerTest, SlidingWindowFreesBlocksThatSlidOut) {
  for (bool prefix_caching : {true, false}) {
    SCOPED_TRACE(prefix_caching ? "prefix caching" : "no prefix caching");
    bm = std::make_unique<BlockManager>(12, 4, prefix_caching, nullptr, /*sliding_window=*/6);
    seqs.clear();
    Sequence& s = seq(iota(100, 10));  // 3 blocks
    prefill(s);
    int most_held = 0;
    for (int32_t t = 0; t < 30; ++t) {
      s.append_token(t);
      bm->free_slid_out_blocks(s);
      ASSERT_TRUE(bm->can_append(s));
      bm->may_append(s);
      s.num_cached_tokens = s.num_tokens();
      bm->cache_blocks(s);
      // The token just computed (position num_tokens - 1) read keys [num_tokens - 6, ...): none
      // of them is in a freed block.
      for (int b = 0; b < int(s.block_table.size()); ++b)
        if (s.block_table[size_t(b)] < 0) {
          EXPECT_LE((b + 1) * 4, s.num_tokens() - 6) << b;
        }
      const int held = int(std::count_if(s.block_table.begin(), s.block_table.end(),
                                         [](int32_t id) { return id >= 0; }));
      most_held = std::max(most_held, held);
      EXPECT_EQ(bm->num_free_blocks(), 12 - held);
    }
    EXPECT_EQ(s.num_tokens(), 40);  // 10 blocks without the window
    EXPECT_LE(most_held, 5);  // the window's 6 keys span 3 blocks, + the kept one, + a new one
    EXPECT_LT(s.block_table[0], 0);
    if (prefix_caching) {  // the freed first block still serves the same prompt
      Sequence& again = seq(iota(100, 10));
      bm->allocate(again);
      EXPECT_EQ(again.num_cached_tokens, 8);
      bm->deallocate(again);
    }
    bm->deallocate(s);
    EXPECT_EQ(bm->num_free_blocks(), 12);
  }
}

TEST_F(BlockManagerTest, RejectsBadSizes) {
  EXPECT_THROW(BlockManager(0, 4, true), Error);
  EXPECT_THROW(BlockManager(4, 0, true), Error);
}

}  // namespace
}  // namespace nanovllm
