// Scheduler: prefill limits, chunked prefill, LIFO preemption and recompute, stop conditions,
// requests that can never fit, and a simulated generation loop over many random configurations.
#include "engine/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "util/check.h"

namespace nanovllm {
namespace {

SchedulerConfig config(int max_num_seqs, int max_num_batched_tokens, int num_blocks,
                       int block_size = 4, bool prefix_caching = false, int max_model_len = 1024,
                       std::vector<int> eos = {}) {
  return SchedulerConfig{max_num_seqs, max_num_batched_tokens, max_model_len, num_blocks,
                         block_size, prefix_caching, std::move(eos)};
}

std::vector<int32_t> prompt_of(int n, int32_t first = 100) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[size_t(i)] = first + i;
  return p;
}

// The token a deterministic "model" samples for seq at position pos (so a recomputed sequence
// continues exactly as before).
int32_t fake_token(int64_t seq_id, int pos) { return int32_t(1000 + (seq_id * 31 + pos * 7) % 500); }

class SchedulerTest : public ::testing::Test {
 protected:
  void make(const SchedulerConfig& c) {
    cfg = c;
    sched = std::make_unique<Scheduler>(c);
  }

  Sequence* add(int num_prompt_tokens, int max_tokens, bool ignore_eos = true, int32_t first = 100) {
    ResolvedSampling s;
    s.max_tokens = max_tokens;
    s.ignore_eos = ignore_eos;
    auto seq = std::make_unique<Sequence>(next_id++, prompt_of(num_prompt_tokens, first), s,
                                          cfg.block_size);
    Sequence* p = seq.get();
    sched->add(std::move(seq));
    return p;
  }

  // schedule + postprocess with fake tokens; returns what was scheduled.
  std::pair<std::vector<Sequence*>, bool> step() {
    auto [seqs, is_prefill] = sched->schedule();
    std::vector<int32_t> tokens;
    for (Sequence* s : seqs) tokens.push_back(fake_token(s->seq_id, s->num_tokens()));
    scheduled_tokens.clear();
    for (Sequence* s : seqs) scheduled_tokens.push_back(s->num_scheduled_tokens);
    sched->postprocess(seqs, tokens, is_prefill);
    for (auto& f : sched->take_finished()) finished.push_back(std::move(f));
    return {seqs, is_prefill};
  }

  void run_to_completion(int max_steps = 10000) {
    for (int i = 0; i < max_steps && !sched->is_finished(); ++i) step();
    ASSERT_TRUE(sched->is_finished());
  }

  const Sequence* finished_seq(int64_t id) const {
    for (auto& f : finished) {
      if (f->seq_id == id) return f.get();
    }
    return nullptr;
  }

  // Every test ends with every block free and every ref count 0.
  void TearDown() override {
    if (!sched) return;
    const BlockManager& bm = sched->block_manager();
    EXPECT_TRUE(sched->is_finished());
    EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
    for (int i = 0; i < bm.num_blocks(); ++i) EXPECT_EQ(bm.ref_count(i), 0) << "block " << i;
  }

  SchedulerConfig cfg{};
  std::unique_ptr<Scheduler> sched;
  int64_t next_id = 0;
  std::vector<int> scheduled_tokens;
  std::vector<std::unique_ptr<Sequence>> finished;
};

TEST_F(SchedulerTest, PrefillIsLimitedByMaxNumSeqs) {
  make(config(2, 1000, 64));
  Sequence* a = add(10, 2);
  Sequence* b = add(10, 2);
  Sequence* c = add(10, 2);
  auto [s1, p1] = step();
  EXPECT_TRUE(p1);
  EXPECT_EQ(s1, (std::vector<Sequence*>{a, b}));
  EXPECT_EQ(scheduled_tokens, (std::vector<int>{10, 10}));
  EXPECT_EQ(sched->num_running(), 2u);
  EXPECT_EQ(sched->num_waiting(), 1u);
  auto [s2, p2] = step();  // running is full: c waits, a and b decode and finish
  EXPECT_FALSE(p2);
  EXPECT_EQ(s2, (std::vector<Sequence*>{a, b}));
  EXPECT_EQ(scheduled_tokens, (std::vector<int>{1, 1}));
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[0]->finish_reason, FinishReason::LENGTH);
  auto [s3, p3] = step();
  EXPECT_TRUE(p3);
  EXPECT_EQ(s3, (std::vector<Sequence*>{c}));
  run_to_completion();
}

TEST_F(SchedulerTest, PrefillIsLimitedByTokenBudget) {
  make(config(8, 32, 64));
  Sequence* a = add(20, 3);
  Sequence* b = add(20, 3);
  Sequence* c = add(20, 3);
  auto [s1, p1] = step();  // a whole, b takes the rest of the budget as a chunk
  EXPECT_TRUE(p1);
  EXPECT_EQ(s1, (std::vector<Sequence*>{a, b}));
  EXPECT_EQ(scheduled_tokens, (std::vector<int>{20, 12}));
  EXPECT_EQ(a->num_tokens(), 21);  // a sampled its first token
  EXPECT_EQ(b->num_tokens(), 20);  // b's chunk token is ignored
  EXPECT_EQ(b->num_cached_tokens, 12);
  EXPECT_EQ(b->block_table.size(), 5u);  // b holds the blocks of its whole prompt
  EXPECT_EQ(sched->num_waiting(), 1u);
  auto [s2, p2] = step();  // b's last chunk first, then c
  EXPECT_TRUE(p2);
  EXPECT_EQ(s2, (std::vector<Sequence*>{b, c}));
  EXPECT_EQ(scheduled_tokens, (std::vector<int>{8, 20}));
  EXPECT_EQ(b->num_tokens(), 21);
  auto [s3, p3] = step();
  EXPECT_FALSE(p3);
  EXPECT_EQ(s3, (std::vector<Sequence*>{a, b, c}));
  run_to_completion();
}

TEST_F(SchedulerTest, LongPromptIsPrefilledInChunks) {
  make(config(8, 16, 64));
  Sequence* r = add(4, 10);
  step();  // r prefilled: r now decodes
  Sequence* a = add(50, 3);
  Sequence* d = add(5, 3);
  std::vector<int> chunks;
  for (int i = 0; i < 3; ++i) {
    auto [seqs, is_prefill] = step();  // no decode while a's prefill is partial
    EXPECT_TRUE(is_prefill);
    EXPECT_EQ(seqs, (std::vector<Sequence*>{a}));
    chunks.push_back(scheduled_tokens[0]);
    EXPECT_EQ(a->num_cached_tokens, 16 * (i + 1));
    EXPECT_EQ(a->num_tokens(), 50);
    EXPECT_EQ(a->block_table.size(), 13u);
  }
  EXPECT_EQ(chunks, (std::vector<int>{16, 16, 16}));
  EXPECT_EQ(r->num_tokens(), 5);
  auto [s4, p4] = step();
  EXPECT_TRUE(p4);
  EXPECT_EQ(s4, (std::vector<Sequence*>{a, d}));
  EXPECT_EQ(scheduled_tokens, (std::vector<int>{2, 5}));
  EXPECT_EQ(a->num_tokens(), 51);
  EXPECT_EQ(a->num_cached_tokens, 50);
  auto [s5, p5] = step();
  EXPECT_FALSE(p5);
  EXPECT_EQ(s5, (std::vector<Sequence*>{r, a, d}));
  EXPECT_EQ(r->num_tokens(), 6);
  run_to_completion();
}

TEST_F(SchedulerTest, ChunkedPromptSharesItsComputedBlocks) {
  make(config(8, 8, 64, 4, /*prefix_caching=*/true));
  Sequence* a = add(20, 2);
  step();  // a: tokens [0, 8) computed, blocks 0 and 1 published
  EXPECT_EQ(a->num_cached_tokens, 8);
  Sequence* b = add(20, 2);  // same prompt
  step();  // a's next chunk fills the budget
  EXPECT_EQ(a->num_cached_tokens, 16);
  step();  // a's last 4 tokens, then b: 16 of its tokens are cached, 4 fit
  EXPECT_EQ(scheduled_tokens, (std::vector<int>{4, 4}));
  EXPECT_EQ(b->num_tokens(), 21);
  EXPECT_EQ(std::vector<int32_t>(b->block_table.begin(), b->block_table.begin() + 4),
            std::vector<int32_t>(a->block_table.begin(), a->block_table.begin() + 4));
  run_to_completion();
}

TEST_F(SchedulerTest, DecodePreemptsTheNewestAndResumeRecomputes) {
  make(config(8, 100, 6));
  Sequence* a = add(4, 10);
  Sequence* b = add(4, 6);
  Sequence* c = add(4, 6);
  step();  // prefill: one block each, 3 free
  for (int i = 0; i < 4; ++i) {
    auto [seqs, is_prefill] = step();  // tokens 5..8 go to each one's second block
    EXPECT_EQ(seqs, (std::vector<Sequence*>{a, b, c}));
  }
  EXPECT_EQ(sched->block_manager().num_free_blocks(), 0);
  EXPECT_EQ(sched->num_preemptions(), 0);
  auto [s1, p1] = step();  // the 9th tokens need 3 blocks: c (newest) is preempted
  EXPECT_FALSE(p1);
  EXPECT_EQ(s1, (std::vector<Sequence*>{a, b}));
  EXPECT_EQ(sched->num_preemptions(), 1);
  EXPECT_EQ(c->status, SequenceStatus::WAITING);
  EXPECT_TRUE(c->block_table.empty());
  EXPECT_EQ(c->num_cached_tokens, 0);
  EXPECT_EQ(c->num_tokens(), 9);  // its generated tokens are kept
  EXPECT_EQ(sched->num_waiting(), 1u);
  ASSERT_EQ(finished.size(), 1u);  // b reached max_tokens and freed its blocks
  EXPECT_EQ(finished[0].get(), b);

  // c resumes: its prefill recomputes all 9 tokens, the last sampled one included.
  auto [s2, p2] = step();
  EXPECT_TRUE(p2);
  EXPECT_EQ(s2, (std::vector<Sequence*>{c}));
  EXPECT_EQ(scheduled_tokens, (std::vector<int>{9}));
  EXPECT_EQ(c->num_tokens(), 10);
  EXPECT_EQ(c->num_completion_tokens(), 6);
  ASSERT_EQ(finished.size(), 2u);  // c reached its max_tokens with the recomputed step
  EXPECT_EQ(finished[1].get(), c);
  for (int pos = 4; pos < 10; ++pos) EXPECT_EQ(c->token_ids[size_t(pos)], fake_token(c->seq_id, pos));
  run_to_completion();
  EXPECT_EQ(a->num_completion_tokens(), 10);
  EXPECT_EQ(sched->num_preemptions(), 1);
}

TEST_F(SchedulerTest, PreemptionOrderIsLifoAndWaitingKeepsAge) {
  make(config(8, 100, 4, 2));  // 8 tokens of KV: prompt 2 + up to 7 generated fits
  Sequence* a = add(2, 7);
  Sequence* b = add(2, 7);
  Sequence* c = add(2, 7);
  step();  // 3 blocks used, 1 free
  auto [s1, p1] = step();  // a takes the free block; b needs one: c (newest) is preempted
  EXPECT_FALSE(p1);
  EXPECT_EQ(s1, (std::vector<Sequence*>{a, b}));
  EXPECT_EQ(sched->num_preemptions(), 1);
  EXPECT_EQ(c->status, SequenceStatus::WAITING);
  auto [s2, p2] = step();  // c cannot come back yet (needs 2 blocks, 1 free)
  EXPECT_FALSE(p2);
  EXPECT_EQ(s2, (std::vector<Sequence*>{a, b}));
  auto [s3, p3] = step();  // a takes the last block; b, now the newest, preempts itself
  EXPECT_FALSE(p3);
  EXPECT_EQ(s3, (std::vector<Sequence*>{a}));
  EXPECT_EQ(sched->num_preemptions(), 2);
  EXPECT_EQ(b->status, SequenceStatus::WAITING);
  EXPECT_EQ(sched->num_waiting(), 2u);
  // The first sequence to come back is b (older, pushed to the front), not c.
  Sequence* resumed = nullptr;
  for (int i = 0; i < 100 && resumed == nullptr; ++i) {
    auto [seqs, is_prefill] = step();
    if (is_prefill) resumed = seqs.at(0);
  }
  EXPECT_EQ(resumed, b);
  EXPECT_EQ(a->status, SequenceStatus::FINISHED);
  run_to_completion(1000);
  EXPECT_EQ(finished.size(), 3u);
  for (auto& f : finished) EXPECT_EQ(f->num_completion_tokens(), 7);
}

TEST_F(SchedulerTest, EosStopsUnlessIgnored) {
  make(config(8, 100, 64, 4, false, 1024, {fake_token(0, 4), 3}));
  Sequence* a = add(4, 5, /*ignore_eos=*/false);  // samples its eos first
  Sequence* b = add(4, 5, /*ignore_eos=*/true);
  (void)b;
  step();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].get(), a);
  EXPECT_EQ(a->finish_reason, FinishReason::STOP);
  EXPECT_EQ(a->num_completion_tokens(), 1);  // the eos token is kept, as nano-vllm does
  EXPECT_TRUE(a->block_table.empty());
  run_to_completion();
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[1]->finish_reason, FinishReason::LENGTH);
  EXPECT_EQ(finished[1]->num_completion_tokens(), 5);
}

TEST_F(SchedulerTest, MaxTokensAndMaxModelLenEndWithLength) {
  make(config(8, 100, 64, 4, false, 12));
  Sequence* a = add(4, 1);    // one token: done right after prefill
  Sequence* b = add(9, 100);  // max_model_len 12: 3 tokens
  step();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].get(), a);
  EXPECT_EQ(a->finish_reason, FinishReason::LENGTH);
  EXPECT_EQ(a->num_completion_tokens(), 1);
  run_to_completion();
  EXPECT_EQ(b->finish_reason, FinishReason::LENGTH);
  EXPECT_EQ(b->num_tokens(), 12);
}

TEST_F(SchedulerTest, RequestsThatCanNeverFitEndWithError) {
  make(config(8, 100, 4, 4, false, 64));  // 16 tokens of KV cache
  add(20, 1);   // 0: the prompt alone needs 5 blocks
  add(10, 10);  // 1: KV of up to 19 tokens: 5 blocks
  add(10, 7);   // 2: KV of up to 16 tokens: fits exactly
  add(64, 1);   // 3: no room for output within max_model_len
  add(4, 0);    // 4: max_tokens < 1
  EXPECT_FALSE(sched->is_finished());
  EXPECT_EQ(sched->num_waiting(), 5u);
  int steps = 0;
  for (; steps < 100 && !sched->is_finished(); ++steps) step();
  ASSERT_TRUE(sched->is_finished());
  ASSERT_EQ(finished.size(), 5u);
  for (int64_t id : {0, 1, 3, 4}) {
    const Sequence* s = finished_seq(id);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->finish_reason, FinishReason::ERROR) << id;
    EXPECT_EQ(s->status, SequenceStatus::FINISHED);
    EXPECT_NE(s->error.find("request " + std::to_string(id)), std::string::npos) << s->error;
  }
  EXPECT_NE(finished_seq(1)->error.find("5 KV cache blocks"), std::string::npos)
      << finished_seq(1)->error;
  EXPECT_EQ(finished_seq(2)->finish_reason, FinishReason::LENGTH);
  EXPECT_EQ(finished_seq(2)->num_completion_tokens(), 7);
}

TEST_F(SchedulerTest, OnlyErrorsGiveAnEmptyStep) {
  make(config(8, 100, 2, 4));
  add(100, 1);
  auto [seqs, is_prefill] = sched->schedule();
  EXPECT_TRUE(seqs.empty());
  EXPECT_TRUE(sched->is_finished());
  auto done = sched->take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::ERROR);
  EXPECT_TRUE(sched->take_finished().empty());
}

TEST_F(SchedulerTest, RejectsBadConfig) {
  EXPECT_THROW(Scheduler(config(0, 10, 10)), Error);
  EXPECT_THROW(Scheduler(config(1, 0, 10)), Error);
  EXPECT_THROW(Scheduler(config(1, 10, 0)), Error);
}

// ---- The simulated generation loop ----

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A fake model over a fake KV cache: each slot stores the hash of the whole token prefix its
// position was computed from, so reading a wrong (or overwritten) block is caught.
struct FakeModel {
  const Scheduler& sched;
  int block_size;
  std::vector<uint64_t> kv;  // [num_blocks * block_size]
  int vocab;

  // [n] hash of token_ids[0..pos] for each pos < n.
  static std::vector<uint64_t> prefix_hashes(const std::vector<int32_t>& tokens, size_t n) {
    std::vector<uint64_t> h(n);
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) h[i] = x = mix(x ^ uint64_t(uint32_t(tokens[i])));
    return h;
  }
  // The next token: depends only on the tokens so far, so a recomputed sequence goes on the same.
  int32_t sample(const std::vector<int32_t>& tokens, size_t n) const {
    return int32_t(mix(prefix_hashes(tokens, n).back()) % uint64_t(vocab));
  }
  uint64_t& slot(const Sequence& s, int pos) {
    return kv[size_t(s.block_table[size_t(pos / block_size)]) * size_t(block_size) +
              size_t(pos % block_size)];
  }
  // Computes tokens [begin, end) of s after checking the cached ones; returns the sampled token.
  int32_t run(const Sequence& s, int begin, int end) {
    const BlockManager& bm = sched.block_manager();
    std::vector<uint64_t> h = prefix_hashes(s.token_ids, size_t(s.num_tokens()));
    for (int pos = 0; pos < begin; ++pos) {
      EXPECT_EQ(slot(s, pos), h[size_t(pos)]) << "seq " << s.seq_id << " reads a wrong KV at " << pos;
    }
    for (int pos = begin; pos < end; ++pos) {
      EXPECT_EQ(bm.ref_count(s.block_table[size_t(pos / block_size)]), 1)
          << "seq " << s.seq_id << " writes a shared block at " << pos;
      slot(s, pos) = h[size_t(pos)];
    }
    return sample(s.token_ids, size_t(end));
  }
};

TEST(SchedulerSimulation, RandomConfigsRunToCompletion) {
  std::mt19937_64 rng(20240601);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int64_t total_preemptions = 0, total_errors = 0, total_requests = 0, total_chunks = 0,
          total_steps = 0, total_cached_tokens = 0;
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    SchedulerConfig c;
    c.block_size = uniform(1, 8);
    c.num_blocks = uniform(4, 64);
    c.max_num_seqs = uniform(1, 8);
    c.max_num_batched_tokens = uniform(1, 64);
    c.max_model_len = uniform(16, 128);
    c.enable_prefix_caching = uniform(0, 3) != 0;
    const int vocab = uniform(2, 40);  // small vocabularies share prefixes and hit eos
    c.eos_token_ids = {0};
    Scheduler sched(c);
    FakeModel model{sched, c.block_size,
                    std::vector<uint64_t>(size_t(c.num_blocks) * size_t(c.block_size)), vocab};

    const int num_requests = uniform(1, 24);
    std::vector<std::vector<int32_t>> prefixes(3);  // shared prompt starts
    for (auto& p : prefixes) {
      p.resize(size_t(uniform(0, 24)));
      for (auto& t : p) t = int32_t(uniform(1, std::max(1, vocab - 1)));
    }
    std::set<Sequence*> live;  // added, not taken back yet
    int64_t next_id = 0;
    auto add_one = [&] {
      std::vector<int32_t> prompt = prefixes[size_t(uniform(0, 2))];
      int extra = uniform(prompt.empty() ? 1 : 0, 30);
      for (int i = 0; i < extra; ++i) prompt.push_back(int32_t(uniform(1, std::max(1, vocab - 1))));
      ResolvedSampling s;
      s.max_tokens = uniform(1, 40);
      s.ignore_eos = uniform(0, 1) == 1;
      auto seq = std::make_unique<Sequence>(next_id++, std::move(prompt), s, c.block_size);
      live.insert(seq.get());
      sched.add(std::move(seq));
    };
    for (int i = 0; i < num_requests / 2 + 1; ++i) add_one();

    std::vector<std::unique_ptr<Sequence>> done;
    std::set<Sequence*> partial;  // sequences between prefill chunks
    int steps = 0;
    const int max_steps = 20000;
    while (steps < max_steps && (!sched.is_finished() || next_id < num_requests)) {
      ++steps;
      if (next_id < num_requests && uniform(0, 3) == 0) add_one();
      auto [seqs, is_prefill] = sched.schedule();
      ASSERT_LE(int(seqs.size()), c.max_num_seqs);
      ASSERT_LE(int(sched.num_running()), c.max_num_seqs);
      if (seqs.empty()) {
        ASSERT_TRUE(sched.is_finished()) << "an empty step with work left";
      }
      ASSERT_EQ(std::set<Sequence*>(seqs.begin(), seqs.end()).size(), seqs.size());
      int num_tokens = 0;
      std::vector<int32_t> tokens;
      for (Sequence* s : seqs) {
        ASSERT_EQ(s->status, SequenceStatus::RUNNING);
        ASSERT_EQ(int(s->block_table.size()), s->num_blocks());
        ASSERT_GE(s->num_scheduled_tokens, 1);
        if (is_prefill) {
          ASSERT_LE(s->num_cached_tokens + s->num_scheduled_tokens, s->num_tokens());
          if (!partial.count(s)) total_cached_tokens += s->num_cached_tokens;  // prefix hits
          total_chunks += s->num_cached_tokens + s->num_scheduled_tokens < s->num_tokens();
        } else {
          ASSERT_EQ(s->num_scheduled_tokens, 1);
          ASSERT_EQ(s->num_cached_tokens, s->num_tokens() - 1);
        }
        num_tokens += s->num_scheduled_tokens;
        tokens.push_back(
            model.run(*s, s->num_cached_tokens, s->num_cached_tokens + s->num_scheduled_tokens));
      }
      if (is_prefill) {
        ASSERT_LE(num_tokens, c.max_num_batched_tokens);
      }
      sched.postprocess(seqs, tokens, is_prefill);
      for (Sequence* s : seqs) {
        if (is_prefill && !s->is_finished() && s->num_cached_tokens < s->num_tokens()) {
          partial.insert(s);
        } else {
          partial.erase(s);
        }
      }
      for (auto& f : sched.take_finished()) {
        ASSERT_EQ(live.erase(f.get()), 1u);
        done.push_back(std::move(f));
      }
      // Ref counts are exactly the number of block tables holding each block.
      const BlockManager& bm = sched.block_manager();
      std::vector<int> refs(size_t(bm.num_blocks()), 0);
      for (Sequence* s : live) {
        for (int32_t id : s->block_table) ++refs[size_t(id)];
      }
      int num_free = 0;
      for (int i = 0; i < bm.num_blocks(); ++i) {
        ASSERT_EQ(bm.ref_count(i), refs[size_t(i)]) << "block " << i;
        num_free += refs[size_t(i)] == 0;
      }
      ASSERT_EQ(bm.num_free_blocks(), num_free);
    }
    ASSERT_LT(steps, max_steps) << "did not finish";
    ASSERT_EQ(int64_t(done.size()), num_requests);
    ASSERT_TRUE(live.empty());
    const BlockManager& bm = sched.block_manager();
    ASSERT_EQ(bm.num_free_blocks(), bm.num_blocks());
    for (int i = 0; i < bm.num_blocks(); ++i) ASSERT_EQ(bm.ref_count(i), 0);
    for (auto& s : done) {
      ASSERT_TRUE(s->is_finished());
      ASSERT_TRUE(s->block_table.empty());
      if (s->finish_reason == FinishReason::ERROR) {
        ++total_errors;
        ASSERT_FALSE(s->error.empty());
        ASSERT_EQ(s->num_completion_tokens(), 0);
        continue;
      }
      ASSERT_GE(s->num_completion_tokens(), 1);
      ASSERT_LE(s->num_completion_tokens(), s->sampling.max_tokens);
      ASSERT_LE(s->num_tokens(), c.max_model_len);
      // Every completion token is what the model samples from the tokens before it, preempted
      // and recomputed or not; eos only ends a sequence.
      for (int pos = s->num_prompt_tokens; pos < s->num_tokens(); ++pos) {
        ASSERT_EQ(s->token_ids[size_t(pos)], model.sample(s->token_ids, size_t(pos))) << pos;
        if (pos + 1 < s->num_tokens() && !s->sampling.ignore_eos) {
          ASSERT_NE(s->token_ids[size_t(pos)], 0);
        }
      }
      bool ended_on_eos = s->last_token == 0 && !s->sampling.ignore_eos;
      ASSERT_EQ(s->finish_reason, ended_on_eos ? FinishReason::STOP : FinishReason::LENGTH);
      if (!ended_on_eos) {
        ASSERT_TRUE(s->num_completion_tokens() == s->sampling.max_tokens ||
                    s->num_tokens() == c.max_model_len);
      }
    }
    total_preemptions += sched.num_preemptions();
    total_requests += num_requests;
    total_steps += steps;
  }
  // The random configurations do exercise preemption, chunking and errors.
  std::printf("%lld requests, %lld steps, %lld preemptions, %lld partial chunks, %lld errors, "
              "%lld prompt tokens from the prefix cache\n",
              (long long)total_requests, (long long)total_steps, (long long)total_preemptions,
              (long long)total_chunks, (long long)total_errors, (long long)total_cached_tokens);
  EXPECT_GT(total_preemptions, 100);
  EXPECT_GT(total_chunks, 100);
  EXPECT_GT(total_errors, 0);
  EXPECT_LT(total_errors, total_requests / 3);
  EXPECT_GT(total_cached_tokens, 1000);
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

// Failure atomicity at the scheduler: a decode step whose token fills a block publishes nothing
// before postprocess; abort_step ends the step's sequences with ERROR, frees all their blocks,
// clears a partial prefill, and leaves waiting sequences to run.
TEST_F(SchedulerTest, AbortStepPublishesNothingAndFreesEverything) {
  make(config(1, 6, 16, 4, /*prefix_caching=*/true));
  Sequence* a = add(7, 5);       // decode step 1 computes position 7: fills block 1
  Sequence* waiting = add(9, 2, true, 500);  // no prefix in common with a
  step();  // a's prefill: tokens [0, 6)
  step();  // a's prefill: token 6; samples token 7
  const BlockManager& bm = sched->block_manager();
  ASSERT_EQ(a->num_tokens(), 8);
  auto [seqs, is_prefill] = sched->schedule();  // decode of position 7
  ASSERT_FALSE(is_prefill);
  ASSERT_EQ(seqs, std::vector<Sequence*>{a});
  EXPECT_FALSE(bm.block_hash(a->block_table[1]).has_value()) << "published before it is computed";
  sched->abort_step(seqs, "the step failed: boom");
  for (auto& f : sched->take_finished()) finished.push_back(std::move(f));
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].get(), a);
  EXPECT_EQ(a->finish_reason, FinishReason::ERROR);
  EXPECT_NE(a->error.find("boom"), std::string::npos);
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  EXPECT_EQ(sched->num_running(), 0u);
  // A failed partial prefill: the next prefill is not stuck behind it.
  auto [chunk, prefill2] = sched->schedule();  // waiting's first chunk (6 of 9 tokens)
  ASSERT_TRUE(prefill2);
  ASSERT_EQ(chunk, std::vector<Sequence*>{waiting});
  sched->abort_step(chunk, "boom again");
  for (auto& f : sched->take_finished()) finished.push_back(std::move(f));
  EXPECT_TRUE(sched->is_finished());
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  Sequence* again = add(9, 2, true, 500);
  run_to_completion();
  EXPECT_EQ(finished_seq(again->seq_id)->finish_reason, FinishReason::LENGTH);
}

}  // namespace
}  // namespace nanovllm
