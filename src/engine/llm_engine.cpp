#include "engine/llm_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <tuple>
#include <utility>

#include "distributed/nccl_communicator.h"
#include "model/tp_shard.h"
#include "runtime/quant.h"
#include "runtime/sampling_rng.h"

namespace nanovllm {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::STOP: return "stop";
    case FinishReason::LENGTH: return "length";
    case FinishReason::ERROR: return "error";
    case FinishReason::NONE: return "none";
  }
  return "none";
}

namespace {

// NANOVLLM_PROFILE_STEPS=FIRST:LAST: the steps (counted from 1 since the engine was made) an
// attached profiler records (Backend::profile_window); unset: none.
std::pair<int64_t, int64_t> profile_steps_from_env() {
  const char* env = std::getenv("NANOVLLM_PROFILE_STEPS");
  if (!env || !*env) return {-1, -1};
  long long first = 0, last = 0;
  char tail = 0;
  if (std::sscanf(env, "%lld:%lld%c", &first, &last, &tail) != 2 || first < 1 || last < first)
    fail("NANOVLLM_PROFILE_STEPS must be FIRST:LAST step numbers (1 <= FIRST <= LAST), got '{}'",
         env);
  return {first, last};
}

void validate_config(const Config& c) {
  if (c.max_num_batched_tokens < 1) fail("max_num_batched_tokens must be >= 1, got {}", c.max_num_batched_tokens);
  if (c.max_num_seqs < 1) fail("max_num_seqs must be >= 1, got {}", c.max_num_seqs);
  if (c.max_model_len < 2) fail("max_model_len must be >= 2, got {}", c.max_model_len);
  if (c.block_size < 1 || c.block_size > 4096) fail("block_size must be in [1, 4096], got {}", c.block_size);
  if (c.kv_cache_memory < 0) fail("kv_cache_memory must be >= 0, got {}", c.kv_cache_memory);
  if (c.scheduling != "mixed" && c.scheduling != "prefill_first")
    fail("scheduling must be mixed or prefill_first, got '{}'", c.scheduling);
  if (c.num_threads < 0) fail("threads must be >= 0, got {}", c.num_threads);
  if (c.kv_cache_dtype != "auto" && c.kv_cache_dtype != "bf16" && c.kv_cache_dtype != "fp8")
    fail("kv_cache_dtype must be auto, bf16 or fp8, got '{}'", c.kv_cache_dtype);
  parse_quantization(c.quantization);  // Error naming the accepted values
  if (c.tensor_parallel_size < 1 || c.tensor_parallel_size > 64)
    fail("tensor_parallel_size must be in [1, 64], got {}", c.tensor_parallel_size);
  if (c.distributed_backend != "threads" && c.distributed_backend != "mpi")
    fail("distributed_backend must be threads or mpi, got '{}'", c.distributed_backend);
  if ((c.tensor_parallel_size > 1 || c.distributed_backend == "mpi") && c.device == "cuda" &&
      !nccl_built())
    fail("tensor parallelism on cuda needs NCCL, which this build lacks (tensor_parallel_size {})",
         c.tensor_parallel_size);
}

}  // namespace

LLMEngine::LLMEngine(const Config& config) : LLMEngine(config, nullptr) {}

LLMEngine::LLMEngine(const Config& config, std::unique_ptr<Backend> backend,
                     const RunnerOptions& runner_options)
    : config_(config) {
  validate_config(config_);
  std::tie(profile_first_step_, profile_last_step_) = profile_steps_from_env();
  model_config_ = load_model_config(config_.model);
  generation_config_ = load_generation_config(config_.model);
  config_.max_model_len = std::min(config_.max_model_len, model_config_.max_context_len());
  eos_token_ids_ = model_config_.eos_token_ids;
  for (int id : generation_config_.eos_token_ids) {
    if (std::find(eos_token_ids_.begin(), eos_token_ids_.end(), id) == eos_token_ids_.end()) {
      eos_token_ids_.push_back(id);
    }
  }
  const std::string tokenizer_path = (std::filesystem::path(config_.model) / "tokenizer.json").string();
  if (std::filesystem::exists(tokenizer_path)) tokenizer_ = Tokenizer::from_file(tokenizer_path);
  int threads = config_.num_threads, device_index = 0;
  if (config_.tensor_parallel_size > 1 || config_.distributed_backend == "mpi") {
    if (config_.distributed_backend == "threads") shard_config(model_config_, config_.tensor_parallel_size);  // Error before any rank starts
    tp_group_ = TpGroup::start(config_, model_config_, runner_options);
    config_.tensor_parallel_size = tp_group_->world_size();
    threads = tp_group_->threads_per_rank();
    device_index = tp_group_->device_index();
  }
  backend_ = backend ? std::move(backend)
                     : make_backend({.device = config_.device, .num_threads = threads,
                                     .device_index = device_index});
  try {
    model_runner_ = std::make_unique<ModelRunner>(config_, model_config_, *backend_, runner_options,
                                                  tp_group_ ? &tp_group_->comm() : nullptr);
  } catch (const std::exception& e) {
    // The other ranks may be waiting in a collective for this one: fail the group, so that they
    // stop (tp_group_'s destructor then joins them).
    if (tp_group_) tp_group_->comm().abort(fmt::format("rank 0 failed to start: {}", e.what()));
    throw;
  }
  SchedulerConfig sc;
  sc.max_num_seqs = config_.max_num_seqs;
  sc.max_num_batched_tokens = config_.max_num_batched_tokens;
  sc.max_model_len = config_.max_model_len;
  sc.num_blocks = model_runner_->num_kv_blocks();
  sc.block_size = config_.block_size;
  sc.enable_prefix_caching = config_.enable_prefix_caching;
  sc.eos_token_ids = eos_token_ids_;
  sc.mixed = config_.scheduling == "mixed";
  if (model_config_.full_attention_layers.empty()) sc.sliding_window = model_config_.sliding_window;
  scheduler_ = std::make_unique<Scheduler>(sc);
}

LLMEngine::~LLMEngine() {
  if (tp_group_) tp_group_->shutdown();  // the other ranks leave their loops and are joined
}

const Tokenizer& LLMEngine::require_tokenizer() const {
  if (!tokenizer_) fail("{}: no tokenizer.json, so text prompts cannot be encoded (give token ids)", config_.model);
  return *tokenizer_;
}

const ChatTemplate& LLMEngine::chat_template() const {
  if (!chat_template_) chat_template_ = load_chat_template(config_.model);
  return *chat_template_;
}

// validate, resolve and add_request: llm_engine_sampling.cpp

bool LLMEngine::abort(int64_t seq_id) {
  if (abort_pending_sibling(seq_id)) return true;
  const bool aborted = scheduler_->abort(seq_id) != nullptr;
  admit_siblings(seq_id);  // siblings of an aborted sample 0 go on (computing their prompt)
  return aborted;
}

StepResult LLMEngine::step() {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  if (step_times_.steps + 1 == profile_first_step_) backend_->profile_window(true);
  const Clock::time_point t0 = Clock::now();
  StepResult result;
  auto [seqs, is_prefill] = scheduler_->schedule();
  const Clock::time_point t1 = Clock::now();
  step_times_.schedule_s += seconds(t0, t1);
  ++step_times_.steps;
  double run_s = 0;  // model_runner_->run's share of the step
  if (!seqs.empty()) {
    try {
      const int num_decodes = is_prefill ? scheduler_->num_decode_seqs() : int(seqs.size());
      std::vector<int32_t> token_ids =
          model_runner_->run(seqs, is_prefill, is_prefill ? num_decodes : 0);
      run_s = seconds(t1, Clock::now());
      step_times_.prepare_s += model_runner_->last_prepare_seconds();
      step_times_.execute_s += run_s - model_runner_->last_prepare_seconds();
      for (const auto& [index, lp] : model_runner_->last_prompt_logprobs()) {
        seqs[size_t(index)]->prompt_logprobs.push_back(lp);
      }
      std::vector<int> before(seqs.size());
      for (size_t i = 0; i < seqs.size(); ++i) before[i] = seqs[i]->num_tokens();
      scheduler_->postprocess(seqs, token_ids, is_prefill);
      result.num_decode_tokens = num_decodes;  // a mixed step's decodes lead its seqs
      for (size_t i = size_t(num_decodes); i < seqs.size(); ++i)
        result.num_prefill_tokens += seqs[i]->num_scheduled_tokens;
      for (size_t i = 0; i < seqs.size(); ++i) {
        Sequence& s = *seqs[i];
        if (s.num_tokens() <= before[i]) continue;
        result.new_tokens.emplace_back(s.seq_id, token_ids[i]);
        if (s.sampling.prompt_logprobs && !s.prompt_logprobs_reported) {  // its prompt is done
          s.prompt_logprobs_reported = true;
          result.prompt_logprobs.emplace_back(s.seq_id, std::move(s.prompt_logprobs));
          s.prompt_logprobs.clear();
        }
      }
    } catch (const std::exception& e) {
      scheduler_->abort_step(seqs, fmt::format("the step failed: {}", e.what()));
      result.new_tokens.clear();
    }
  }
  result.finished = scheduler_->take_finished();
  after_step(seqs, result);  // logprobs, n > 1 siblings (llm_engine_sampling.cpp)
  step_times_.postprocess_s += seconds(t1, Clock::now()) - run_s;
  if (step_times_.steps == profile_last_step_) backend_->profile_window(false);
  return result;
}

}  // namespace nanovllm
