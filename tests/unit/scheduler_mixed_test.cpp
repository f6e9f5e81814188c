// Scheduler, mixed mode (vLLM's chunked-prefill scheduling): one token budget per step shared by
// the running decodes (first, one token each) and the next prompt chunks (the rest); at most one
// partial prefill; LIFO preemption may take the partial prefill; steps without prompt work are
// plain decode steps. And the same simulated workloads in both modes finish with the same tokens.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/scheduler.h"

namespace nanovllm {
namespace {

SchedulerConfig mixed_config(int max_num_seqs, int budget, int num_blocks, int block_size = 4,
                             bool prefix_caching = false, bool mixed = true) {
  SchedulerConfig c{max_num_seqs, budget, 1024, num_blocks, block_size, prefix_caching, {}};
  c.mixed = mixed;
  return c;
}

// A deterministic "model": the token depends on the sequence and position only.
int32_t fake_token(int64_t seq_id, int pos) { return int32_t(1000 + (seq_id * 31 + pos * 7) % 500); }

struct Harness {
  explicit Harness(const SchedulerConfig& c) : cfg(c), sched(c) {}
  Sequence* add(int num_prompt, int max_tokens, int32_t first = 100) {
    ResolvedSampling s;
    s.max_tokens = max_tokens;
    s.ignore_eos = true;
    std::vector<int32_t> p(static_cast<size_t>(num_prompt));
    for (int i = 0; i < num_prompt; ++i) p[size_t(i)] = first + i;
    auto seq = std::make_unique<Sequence>(next_id++, p, s, cfg.block_size);
    Sequence* raw = seq.get();
    sched.add(std::move(seq));
    return raw;
  }
  std::pair<std::vector<Sequence*>, bool> step() {
    auto [seqs, is_prefill] = sched.schedule();
    last_scheduled.clear();
    tokens_before.clear();
    std::vector<int32_t> tokens;
    for (Sequence* s : seqs) {
      last_scheduled.push_back(s->num_scheduled_tokens);
      tokens_before.push_back(s->num_tokens());
      tokens.push_back(fake_token(s->seq_id, s->num_tokens()));
    }
    sched.postprocess(seqs, tokens, is_prefill);
    for (auto& f : sched.take_finished()) finished.push_back(std::move(f));
    return {seqs, is_prefill};
  }
  SchedulerConfig cfg;
  Scheduler sched;
  int64_t next_id = 0;
  std::vector<int> last_scheduled;
  std::vector<int> tokens_before;  // of each seq of the last step, before its postprocess
  std::vector<std::unique_ptr<Sequence>> finished;
};

TEST(SchedulerMixed, DecodesFirstThenTheChunkTakesTheRest) {
  Harness h(mixed_config(8, 16, 100));
  Sequence* a = h.add(6, 10);
  auto [s1, p1] = h.step();
  ASSERT_EQ(s1, std::vector<Sequence*>({a}));
  EXPECT_TRUE(p1);
  EXPECT_EQ(h.sched.num_decode_seqs(), 0);

  Sequence* b = h.add(40, 4);
  auto [s2, p2] = h.step();  // a decodes, b's prompt takes the other 15 tokens
  ASSERT_EQ(s2, std::vector<Sequence*>({a, b}));
  EXPECT_TRUE(p2);
  EXPECT_EQ(h.sched.num_decode_seqs(), 1);
  EXPECT_EQ(h.last_scheduled, std::vector<int>({1, 15}));
  EXPECT_EQ(a->num_completion_tokens(), 2);
  EXPECT_EQ(b->num_cached_tokens, 15);

  Sequence* c = h.add(3, 4);
  auto [s3, p3] = h.step();  // b still partial: c waits (at most one partial prefill)
  ASSERT_EQ(s3, std::vector<Sequence*>({a, b}));
  EXPECT_EQ(h.last_scheduled, std::vector<int>({1, 15}));

  auto [s4, p4] = h.step();  // b ends its prompt (10), c takes what is left (3 of 5)
  ASSERT_EQ(s4, std::vector<Sequence*>({a, b, c}));
  EXPECT_TRUE(p4);
  EXPECT_EQ(h.sched.num_decode_seqs(), 1);
  EXPECT_EQ(h.last_scheduled, std::vector<int>({1, 10, 3}));
  EXPECT_EQ(b->num_completion_tokens(), 1);

  auto [s5, p5] = h.step();  // no prompt work left: a plain decode step
  ASSERT_EQ(s5, std::vector<Sequence*>({a, b, c}));
  EXPECT_FALSE(p5);
  EXPECT_EQ(h.sched.num_decode_seqs(), 0);
  EXPECT_EQ(h.last_scheduled, std::vector<int>({1, 1, 1}));
}

TEST(SchedulerMixed, PrefillFirstKeepsStepsPure) {
  Harness h(mixed_config(8, 16, 100, 4, false, /*mixed=*/false));
  Sequence* a = h.add(6, 10);
  h.step();
  Sequence* b = h.add(40, 4);
  for (int i = 0; i < 3; ++i) {  // b's 40 tokens in chunks of 16, a waits
    auto [s, p] = h.step();
    EXPECT_EQ(s, std::vector<Sequence*>({b}));
    EXPECT_TRUE(p);
    EXPECT_EQ(h.sched.num_decode_seqs(), 0);
  }
  auto [s, p] = h.step();
  EXPECT_EQ(s, std::vector<Sequence*>({a, b}));
  EXPECT_FALSE(p);
}

TEST(SchedulerMixed, ABudgetSpentOnDecodesLeavesPromptsWaiting) {
  // Budget 2: a and b (1-token prompts) decode with both tokens, so c waits until one ends;
  // no step goes over the budget, and everything finishes.
  Harness h(mixed_config(8, 2, 100));
  Sequence* a = h.add(1, 3);
  Sequence* b = h.add(1, 5);
  auto [s1, p1] = h.step();
  EXPECT_EQ(s1, std::vector<Sequence*>({a, b}));
  Sequence* c = h.add(4, 2);
  for (int i = 0; i < 2; ++i) {
    auto [s, p] = h.step();
    EXPECT_EQ(s, std::vector<Sequence*>({a, b}));
    EXPECT_FALSE(p);
    EXPECT_EQ(c->status, SequenceStatus::WAITING);
  }
  // a has ended (3 tokens): b decodes and c takes the one token left.
  auto [s4, p4] = h.step();
  EXPECT_EQ(s4, std::vector<Sequence*>({b, c}));
  EXPECT_TRUE(p4);
  EXPECT_EQ(h.sched.num_decode_seqs(), 1);
  EXPECT_EQ(h.last_scheduled, std::vector<int>({1, 1}));
  for (int i = 0; i < 100 && !h.sched.is_finished(); ++i) {
    h.step();
    int tokens = 0;
    for (int t : h.last_scheduled) tokens += t;
    EXPECT_LE(tokens, 2);
  }
  EXPECT_TRUE(h.sched.is_finished());
  EXPECT_EQ(h.finished.size(), 3u);
}

TEST(SchedulerMixed, PreemptsThePartialPrefillWhenItIsNewest) {
  // 5 blocks of 4 tokens. a (3 prompt tokens) runs; b (16) takes the 4 other blocks as a chunk;
  // a's next decode needs a block: b, the newest, is preempted and starts over later.
  Harness h(mixed_config(8, 8, 5));
  Sequence* a = h.add(3, 6);
  h.step();
  Sequence* b = h.add(16, 4);
  auto [s2, p2] = h.step();
  ASSERT_EQ(s2, std::vector<Sequence*>({a, b}));
  EXPECT_EQ(h.last_scheduled, std::vector<int>({1, 7}));
  auto [s3, p3] = h.step();  // a at position 4 needs its second block
  EXPECT_EQ(s3, std::vector<Sequence*>({a}));
  EXPECT_FALSE(p3);
  EXPECT_EQ(h.sched.num_preemptions(), 1);
  EXPECT_EQ(b->status, SequenceStatus::WAITING);
  EXPECT_EQ(b->num_cached_tokens, 0);
  EXPECT_TRUE(b->block_table.empty());
  for (int i = 0; i < 100 && !h.sched.is_finished(); ++i) h.step();
  ASSERT_TRUE(h.sched.is_finished());
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.sched.block_manager().num_free_blocks(), 5);
}

TEST(SchedulerMixed, AFailedMixedStepEndsItsDecodesAndItsChunk) {
  Harness h(mixed_config(8, 8, 100));
  Sequence* a = h.add(3, 6);
  Sequence* c = h.add(2, 6, 300);
  h.step();
  Sequence* b = h.add(20, 4);
  auto [seqs, is_prefill] = h.sched.schedule();  // a, c decode; b's first chunk (6 tokens)
  ASSERT_EQ(seqs, std::vector<Sequence*>({a, c, b}));
  ASSERT_TRUE(is_prefill);
  ASSERT_EQ(h.sched.num_decode_seqs(), 2);
  h.sched.abort_step(seqs, "the step failed: injected");
  auto done = h.sched.take_finished();
  ASSERT_EQ(done.size(), 3u);
  for (const auto& s : done) EXPECT_EQ(s->finish_reason, FinishReason::ERROR);
  EXPECT_TRUE(h.sched.is_finished());
  EXPECT_EQ(h.sched.block_manager().num_free_blocks(), 100);
  // The scheduler goes on (no partial prefill left behind).
  Sequence* d = h.add(12, 2);
  auto [s2, p2] = h.step();
  EXPECT_EQ(s2, std::vector<Sequence*>({d}));
  EXPECT_EQ(h.last_scheduled, std::vector<int>({8}));
}

// Random workloads with arrivals, tight budgets and caches: every step keeps the rules, and both
// modes hand out the same tokens for every request.
TEST(SchedulerMixed, RandomWorkloadsKeepTheRulesAndMatchPrefillFirst) {
  std::mt19937 rng(7);
  int mixed_steps = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int block_size = 1 + int(rng() % 8), budget = 4 + int(rng() % 40);
    const int max_seqs = 1 + int(rng() % 6);
    const bool prefix = rng() % 2;
    std::vector<std::pair<int, int>> requests;  // (prompt, max_tokens)
    int longest_blocks = 0;
    for (int i = 0; i < 6; ++i) {
      requests.push_back({1 + int(rng() % 50), 1 + int(rng() % 12)});
      longest_blocks = std::max(longest_blocks, (requests.back().first + requests.back().second +
                                                 block_size - 2) / block_size);
    }
    const int blocks = longest_blocks + int(rng() % 20);
    const int arrive_every = 1 + int(rng() % 4);
    std::map<int64_t, std::vector<int32_t>> out[2];
    for (int mode = 0; mode < 2; ++mode) {
      Harness h(mixed_config(max_seqs, budget, blocks, block_size, prefix, mode == 1));
      size_t next = 0;
      for (int step = 0; step < 5000 && (next < requests.size() || !h.sched.is_finished()); ++step) {
        if (next < requests.size() && step % arrive_every == 0) {
          h.add(requests[next].first, requests[next].second, 100 + int32_t(next % 2));
          ++next;
        }
        auto [seqs, is_prefill] = h.step();
        const int nd = h.sched.num_decode_seqs();
        int tokens = 0, partial = 0;
        for (size_t i = 0; i < seqs.size(); ++i) {
          tokens += h.last_scheduled[i];
          if (int(i) < nd) {
            EXPECT_EQ(h.last_scheduled[i], 1);
          }
          // A prefill chunk that did not end its prompt appends no token.
          if (seqs[i]->num_tokens() == h.tokens_before[i]) ++partial;
        }
        EXPECT_LE(partial, 1);
        EXPECT_LE(int(seqs.size()), max_seqs);
        if (is_prefill) {
          EXPECT_LE(tokens, std::max(budget, nd));
        }
        if (mode == 0) {
          EXPECT_EQ(nd, 0);
        }
        if (nd > 0) ++mixed_steps;
      }
      ASSERT_TRUE(h.sched.is_finished()) << "trial " << trial;
      for (auto& f : h.finished) {
        EXPECT_EQ(f->finish_reason, FinishReason::LENGTH) << f->error;
        out[mode][f->seq_id] = f->token_ids;
      }
      EXPECT_EQ(h.sched.block_manager().num_free_blocks(), blocks);
    }
    EXPECT_EQ(out[0], out[1]) << "trial " << trial;
  }
  EXPECT_GT(mixed_steps, 50);
}

}  // namespace
}  // namespace nanovllm
