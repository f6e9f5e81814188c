#pragma once
// Scheduler: waiting/running queues, decode with LIFO preemption (nano-vllm's
// engine/scheduler.py), chunked prefill, and two step policies (SchedulerConfig::mixed):
// "mixed" (vLLM's chunked-prefill scheduling: decodes and prompt chunks share a step) and
// "prefill_first" (nano-vllm's: a step is all prefill or all decode).
//
// Rules:
//  - add() checks whether a request can ever fit. One that cannot is held aside (it counts as
//    waiting) and ended with FinishReason::ERROR at the next schedule(), so that the usual loop
//    (while !is_finished(): schedule, run, postprocess, take_finished) hands it out. It cannot fit
//    when max_tokens < 1, when the prompt has max_model_len tokens or more (prompt + completion
//    never exceed max_model_len), or when its KV at its longest, min(prompt + max_tokens,
//    max_model_len) - 1 tokens (the last sampled token is never computed), needs more blocks than
//    the whole cache. Every other request finishes: a running sequence alone can always append, a
//    waiting one alone can always allocate, so preemption cannot loop forever.
//  - Prefill (both modes). Running holds at most max_num_seqs sequences. Prompt work takes, in
//    order: the one sequence whose prefill is partial (if any), then waiting sequences in FIFO
//    order while the token budget remains, running < max_num_seqs and their blocks can be
//    allocated (no skipping). Each computes tokens [num_cached_tokens, num_tokens); the first one
//    that does not fit takes the rest of the budget as a chunk and ends the step. It keeps all its
//    blocks (allocated for the whole prompt at admission) and continues first in the next step, so
//    at most one prefill is partial at a time; while it is partial it is the newest running
//    sequence (nothing is admitted after it).
//  - Decode: running sequences whose prefill is complete, oldest first, one token each. When a
//    block cannot be appended the newest running sequence is preempted (deallocated, status
//    WAITING, pushed to the front of waiting; its tokens so far are recomputed on resume; in
//    mixed mode that may be the partial prefill, which then starts over); a sequence that is the
//    only one left preempts itself.
//  - prefill_first: prompt work with the whole budget (max_num_batched_tokens); only when none is
//    scheduled, a decode step of every running sequence. No decode runs while a prefill is partial.
//  - mixed: first the decodes of every running sequence but the partial prefill, then prompt work
//    with the budget they leave (max_num_batched_tokens - decodes, when > 0; while the decodes
//    spend it all, waiting prompts wait). The decodes always fit the budget: a sequence is admitted
//    only with at least one token of it, so running never exceeds it. A step with prompt work is a
//    prefill step whose first num_decode_seqs() sequences are the decodes; a step without is a
//    plain decode step (num_decode_seqs() = 0, so it is what CUDA graphs capture).
//  - postprocess(): prefill advances num_cached_tokens by the chunk, decode by its token, and the
//    full blocks now computed are published in the prefix cache (only here: schedule() publishes
//    nothing, so a step that fails publishes nothing); a chunk short of num_tokens ignores its
//    token. Then the token is appended; eos (unless ignore_eos) or one of stop_token_ids, once
//    the output has min_tokens tokens -> STOP, max_tokens or max_model_len tokens -> LENGTH.
//  - What a step computes (for ModelRunner): prefill (and the decodes of a mixed step, for which
//    num_cached_tokens == num_tokens() - 1 and num_scheduled_tokens == 1), tokens [num_cached_tokens, num_cached_tokens +
//    num_scheduled_tokens) of each seq, whose token counts only when that reaches num_tokens();
//    decode, token num_tokens() - 1 (num_cached_tokens == num_tokens() - 1). block_table always
//    covers every token computed.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace nanovllm {

struct SchedulerConfig {
  int max_num_seqs;
  int max_num_batched_tokens;
  int max_model_len;
  int num_blocks;
  int block_size;
  bool enable_prefix_caching;
  std::vector<int> eos_token_ids;
  bool mixed = false;  // Config::scheduling == "mixed" (the engine's default); false: prefill_first
  // The window every layer attends within (0: none, or some layers attend to every key): decode
  // frees the KV blocks that slid out of it (BlockManager::free_slid_out_blocks).
  int sliding_window = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Queues seq (or, when it can never fit, sets it to end with ERROR at the next schedule()).
  void add(std::unique_ptr<Sequence> seq);
  // No waiting and no running sequence.
  bool is_finished() const;
  // The next step: sequences and whether it is a prefill. Sets each seq's num_scheduled_tokens.
  // Empty when nothing can run: nothing is left after ending the requests that can never fit (or a
  // lone sequence just preempted itself, which add()'s check rules out).
  // The pointers stay valid until take_finished() hands the sequence out.
  std::pair<std::vector<Sequence*>, bool> schedule();
  // Of the last schedule(): how many leading seqs of a prefill step are decodes (mixed mode).
  int num_decode_seqs() const { return num_decode_seqs_; }
  // Applies one step's sampled tokens (token_ids[i] for seqs[i]).
  void postprocess(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& token_ids,
                   bool is_prefill);
  // A step over seqs failed (its run or postprocess threw): ends every one of them still running
  // with FinishReason::ERROR and `error`, freeing its blocks. Nothing was published for the step
  // (postprocess publishes blocks only once their KV is computed), so the prefix cache and the
  // other sequences are as before the step.
  void abort_step(const std::vector<Sequence*>& seqs, const std::string& error);
  // Finished since the last call, in finishing order (errors included).
  std::vector<std::unique_ptr<Sequence>> take_finished();
  // Removes a waiting or running sequence (call between steps), frees its blocks and returns it
  // (status FINISHED, finish_reason NONE); nullptr when no such sequence is waiting or running.
  std::unique_ptr<Sequence> abort(int64_t seq_id);

  int64_t num_preemptions() const { return num_preemptions_; }
  const BlockManager& block_manager() const { return block_manager_; }
  size_t num_waiting() const { return waiting_.size() + rejected_.size(); }
  size_t num_running() const { return running_.size(); }

 private:
  void preempt(std::unique_ptr<Sequence> seq);
  // Appends decodes of the running seqs (but the partial prefill) to `scheduled`, preempting.
  void schedule_decodes(std::vector<Sequence*>& scheduled);
  // Appends prompt work within `budget` to `scheduled`.
  void schedule_prefills(std::vector<Sequence*>& scheduled, int budget);
  void finish(Sequence& seq, FinishReason reason);
  bool is_eos(int32_t token_id) const;
  bool is_stop_token(const Sequence& seq, int32_t token_id) const;

  SchedulerConfig config_;
  BlockManager block_manager_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> rejected_;  // can never fit: ERROR at the next schedule()
  std::deque<std::unique_ptr<Sequence>> running_;  // oldest first
  std::vector<std::unique_ptr<Sequence>> finished_;
  Sequence* prefilling_ = nullptr;  // the running sequence whose prefill is partial, if any
  int64_t num_preemptions_ = 0;
  int num_decode_seqs_ = 0;
};

}  // namespace nanovllm
