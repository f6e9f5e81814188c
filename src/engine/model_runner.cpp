#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "distributed/nccl_communicator.h"
#include "engine/sampling_batch_fill.h"
#include "engine/tp_control.h"
#include "model/safetensors.h"
#include "model/tp_shard.h"
#include "model/weights.h"

namespace nanovllm {

namespace {

Tensor carve(char*& cursor, DType dtype, std::initializer_list<int64_t> shape, DeviceKind device) {
  Tensor t = Tensor::contiguous(cursor, dtype, shape, device);
  cursor += (t.nbytes() + 63) / 64 * 64;
  return t;
}

// Uploads the first host.size() elements of `fixed` (a 1-D or 2-D fixed buffer) and returns the
// view of them: the same address every step.
template <typename T>
Tensor upload_rows(Backend& backend, Tensor fixed, const std::vector<T>& host, int64_t rows) {
  Tensor view = fixed.slice_rows(0, rows);
  NV_CHECK(view.numel() == int64_t(host.size()), "metadata {} for {} values", view.describe(),
           host.size());
  if (!host.empty()) backend.upload(view, host.data());
  return view;
}

constexpr int64_t kCpuKvCap = int64_t(4) << 30;

}  // namespace

int64_t default_kv_cache_bytes(DeviceKind device, const DeviceMemory& memory,
                               float gpu_memory_utilization, int64_t reserved) {
  if (device == DeviceKind::CPU) {
    const int64_t available = memory.free_bytes - reserved;
    return available <= 0 ? 0 : std::min(kCpuKvCap, available / 2);
  }
  const int64_t used = memory.total_bytes - memory.free_bytes;
  return std::max<int64_t>(0, int64_t(double(memory.total_bytes) * gpu_memory_utilization) - used);
}

ModelRunner::ModelRunner(const Config& config, const ModelConfig& model_config, Backend& backend,
                         const RunnerOptions& options, Communicator* comm)
    : config_(config),
      model_config_(model_config),
      vocab_size_(model_config.vocab_size),
      backend_(backend),
      options_(options),
      comm_(comm != nullptr && comm->world_size() > 1 ? comm : nullptr),
      tp_(comm_ ? comm_->world_size() : 1) {
  load_model(config, model_config);
  max_tokens_ = std::max(config.max_num_batched_tokens, config.max_num_seqs);
  max_num_blocks_per_seq_ = (config.max_model_len + config.block_size - 1) / config.block_size + 1;
  model_->reserve(max_tokens_, config.max_num_seqs);
  allocate_metadata();
  buckets_ = nanovllm::graph_buckets(config.max_num_seqs);
  pad_decode_ = options.pad_decode.value_or(false);
  if (options.warmup.value_or(backend.device() != DeviceKind::CPU)) warmup_model();
  allocate_kv_cache();
  if (!config.enforce_eager && tp_ == 1) capture_graphs();
}

ModelRunner::~ModelRunner() {
  if (tp_ > 1) backend_.set_communicator(nullptr);
}

void ModelRunner::load_model(const Config& config, const ModelConfig& model_config) {
  if (tp_ > 1) {
    model_config_ = shard_config(model_config, tp_);  // Error before any weight is read
    if (backend_.device() == DeviceKind::CPU) {
      data_comm_ = comm_;
    } else {
      device_comm_ = make_nccl_communicator(comm_, backend_.device_index(), backend_.native_stream());
      data_comm_ = device_comm_.get();
    }
  }
  Checkpoint checkpoint(config.model);
  kv_format_ = make_kv_cache_format(config.kv_cache_dtype, checkpoint, model_config.num_hidden_layers);
  const QuantScheme quant = parse_quantization(config.quantization);
  ModelWeights weights = tp_ > 1 ? load_weights_shard(checkpoint, model_config, {comm_->rank(), tp_}, backend_, quant)
                                 : load_weights(checkpoint, model_config, backend_, quant);
  model_ = std::make_unique<Qwen3Model>(model_config_, std::move(weights), backend_, config.max_model_len);
  if (tp_ > 1) backend_.set_communicator(data_comm_);
}

size_t ModelRunner::kv_block_bytes() const {
  return 2 * size_t(model_config_.num_hidden_layers) * size_t(config_.block_size) *
         size_t(model_config_.num_key_value_heads) * size_t(model_config_.head_dim) *
         dtype_size(kv_format_.dtype);
}

int64_t ModelRunner::reserved_bytes() const {
  return int64_t(model_->workspace_bytes() + metadata_buf_.bytes() + sampled_buf_.bytes());
}

void ModelRunner::allocate_metadata() {
  const int64_t T = max_tokens_, B = config_.max_num_seqs, W = max_num_blocks_per_seq_;
  const int64_t i32 = 4 * (3 * T + 4 * B + 2 + B * W + B), f32 = 4 * 2 * B, i64 = 8 * 2 * B;
  metadata_buf_ = backend_.alloc(size_t(i32 + f32 + i64 + 64 * 16));
  char* cursor = static_cast<char*>(metadata_buf_.data());
  const DeviceKind dev = backend_.device();
  Metadata& m = metadata_;
  m.input_ids = carve(cursor, DType::I32, {T}, dev);
  m.positions = carve(cursor, DType::I32, {T}, dev);
  m.slot_mapping = carve(cursor, DType::I32, {T}, dev);
  m.cu_seqlens_q = carve(cursor, DType::I32, {B + 1}, dev);
  m.cu_seqlens_k = carve(cursor, DType::I32, {B + 1}, dev);
  m.context_lens = carve(cursor, DType::I32, {B}, dev);
  m.last_token_indices = carve(cursor, DType::I32, {B}, dev);
  m.block_tables = carve(cursor, DType::I32, {B, W}, dev);
  m.temperatures = carve(cursor, DType::F32, {B}, dev);
  m.top_k = carve(cursor, DType::I32, {B}, dev);
  m.top_p = carve(cursor, DType::F32, {B}, dev);
  m.seeds = carve(cursor, DType::I64, {B}, dev);
  m.sample_offsets = carve(cursor, DType::I64, {B}, dev);
  NV_CHECK(cursor <= static_cast<char*>(metadata_buf_.data()) + metadata_buf_.bytes());
  sampled_buf_ = backend_.alloc(sizeof(int32_t) * size_t(B));
  // The host batch, reserved once: clear() and push_back never reallocate after this.
  HostBatch& h = host_;
  for (auto* v : {&h.input_ids, &h.positions, &h.slot_mapping}) v->reserve(size_t(T));
  for (auto* v : {&h.cu_seqlens_q, &h.cu_seqlens_k}) v->reserve(size_t(B + 1));
  for (auto* v : {&h.context_lens, &h.last_token_indices, &h.top_k}) v->reserve(size_t(B));
  h.block_tables.reserve(size_t(B * W));
  h.temperatures.reserve(size_t(B));
  h.top_p.reserve(size_t(B));
  h.seeds.reserve(size_t(B));
  h.sample_offsets.reserve(size_t(B));
}

const HostBatch& ModelRunner::prepare_prefill(const std::vector<Sequence*>& seqs,
                                              int num_decode_seqs) {
  HostBatch& b = host_;
  b.clear();
  b.is_prefill = true;
  NV_CHECK(num_decode_seqs == 0 || (0 < num_decode_seqs && num_decode_seqs < int(seqs.size())),
           "{} decodes in a step of {} seqs", num_decode_seqs, seqs.size());
  for (int i = 0; i < num_decode_seqs; ++i) {
    const Sequence& d = *seqs[size_t(i)];
    NV_CHECK(d.num_scheduled_tokens == 1 && d.num_cached_tokens == d.num_tokens() - 1,
             "seq {} is scheduled as a decode", d.seq_id);
  }
  b.num_decode_seqs = num_decode_seqs;
  b.cu_seqlens_q.push_back(0);
  b.cu_seqlens_k.push_back(0);
  NV_CHECK(int(seqs.size()) <= config_.max_num_seqs, "{} seqs in a step", seqs.size());
  prompt_row_seq_.clear(), prompt_row_target_.clear(), prompt_row_top_.clear();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const Sequence* seq = seqs[s];
    const int start = seq->num_cached_tokens;
    const int end = start + seq->num_scheduled_tokens;
    NV_CHECK(seq->num_scheduled_tokens > 0 && end <= seq->num_tokens());
    NV_CHECK(b.input_ids.size() + size_t(end - start) <= size_t(max_tokens_),
             "a prefill of more than {} tokens", max_tokens_);
    if (seq->needs_prompt_logprobs()) {  // row p scores prompt token p + 1
      const int first = int(seq->prompt_logprobs.size());
      NV_CHECK(start <= first, "seq {}: rows {}.. are cached but not scored", seq->seq_id, start);
      const int top = *seq->sampling.prompt_logprobs < 0 ? vocab_size_ : *seq->sampling.prompt_logprobs;
      for (int p = first; p < std::min(end, seq->num_prompt_tokens - 1); ++p) {
        b.logit_rows.push_back(int32_t(b.input_ids.size()) + (p - start));
        prompt_row_seq_.push_back(int(s));
        prompt_row_target_.push_back(seq->token_ids[size_t(p) + 1]);
        prompt_row_top_.push_back(top);
      }
    }
    for (int i = start; i < end; ++i) {
      b.input_ids.push_back(seq->token_ids[i]);
      b.positions.push_back(i);
      const int32_t block = seq->block_table[i / config_.block_size];
      b.slot_mapping.push_back(block * config_.block_size + i % config_.block_size);
    }
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + (end - start));
    b.cu_seqlens_k.push_back(b.cu_seqlens_k.back() + end);
    b.context_lens.push_back(end);
    b.last_token_indices.push_back(b.cu_seqlens_q.back() - 1);
    b.max_seqlen_q = std::max(b.max_seqlen_q, end - start);
    b.max_seqlen_k = std::max(b.max_seqlen_k, end);
  }
  prepare_block_tables(seqs);
  prepare_sample(seqs);
  return b;
}

const HostBatch& ModelRunner::prepare_decode(const std::vector<Sequence*>& seqs,
                                             int padded_seqs) {
  HostBatch& b = host_;
  b.clear();
  b.is_prefill = false;
  b.cu_seqlens_q.push_back(0);
  b.cu_seqlens_k.push_back(0);
  NV_CHECK(int(seqs.size()) <= padded_seqs && padded_seqs <= config_.max_num_seqs,
           "decode of {} seqs padded to {} (max_num_seqs {})", seqs.size(), padded_seqs,
           config_.max_num_seqs);
  for (const Sequence* seq : seqs) {
    const int pos = seq->num_tokens() - 1;
    b.input_ids.push_back(seq->last_token);
    b.positions.push_back(pos);
    const int32_t block = seq->block_table[pos / config_.block_size];
    b.slot_mapping.push_back(block * config_.block_size + pos % config_.block_size);
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + 1);
    b.cu_seqlens_k.push_back(b.cu_seqlens_k.back() + pos + 1);
    b.context_lens.push_back(pos + 1);
    b.last_token_indices.push_back(int32_t(b.last_token_indices.size()));
    b.max_seqlen_k = std::max(b.max_seqlen_k, pos + 1);
  }
  b.max_seqlen_q = 1;
  prepare_block_tables(seqs);
  prepare_sample(seqs);
  for (int i = int(seqs.size()); i < padded_seqs; ++i) append_padding_lane();
  return b;
}

// A padded decode lane (see HostBatch): writes nothing, reads key 0 of block 0.
void ModelRunner::append_padding_lane() {
  HostBatch& b = host_;
  b.input_ids.push_back(0);
  b.positions.push_back(0);
  b.slot_mapping.push_back(-1);
  b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + 1);
  b.cu_seqlens_k.push_back(b.cu_seqlens_k.back() + 1);
  b.context_lens.push_back(1);
  b.last_token_indices.push_back(int32_t(b.last_token_indices.size()));
  b.max_seqlen_k = std::max(b.max_seqlen_k, 1);
  b.block_tables.push_back(0);
  b.block_tables.resize(b.block_tables.size() + size_t(max_num_blocks_per_seq_ - 1), -1);
  b.temperatures.push_back(0.0f);
  b.top_k.push_back(0);
  b.top_p.push_back(1.0f);
  b.seeds.push_back(0);
  b.sample_offsets.push_back(0);
}

// block_tables [num_seqs, max_num_blocks_per_seq], each row padded with -1: the same width every
// step, and every column rewritten, so no stale entry survives from an earlier step.
void ModelRunner::prepare_block_tables(const std::vector<Sequence*>& seqs) {
  HostBatch& b = host_;
  b.max_num_blocks = max_num_blocks_per_seq_;
  for (const Sequence* seq : seqs) {
    NV_CHECK(int(seq->block_table.size()) <= max_num_blocks_per_seq_, "seq {} holds {} blocks",
             seq->seq_id, seq->block_table.size());
    b.block_tables.insert(b.block_tables.end(), seq->block_table.begin(), seq->block_table.end());
    b.block_tables.resize(b.block_tables.size() + max_num_blocks_per_seq_ - seq->block_table.size(), -1);
  }
}

void ModelRunner::prepare_sample(const std::vector<Sequence*>& seqs) {
  HostBatch& b = host_;
  for (const Sequence* seq : seqs) {
    b.temperatures.push_back(seq->sampling.temperature);
    b.top_k.push_back(seq->sampling.top_k);
    b.top_p.push_back(seq->sampling.top_p);
    b.seeds.push_back(seq->sampling.seed);
    b.sample_offsets.push_back(seq->num_tokens());
  }
  fill_sampling_batch(b.sampling, seqs);  // penalties, logit_bias, min_tokens, logprobs
  grammar_seqs_.clear();
  for (Sequence* seq : seqs)
    if (seq->grammar) {
      grammar_seqs_ = seqs;  // the bitmasks: in execute(), beside the forward
      break;
    }
}

void ModelRunner::upload(bool sampling) {
  const HostBatch& h = host_;
  const Metadata& m = metadata_;
  ForwardBatch& b = batch_;
  b.host = &h;
  b.is_prefill = h.is_prefill;
  b.num_decode_seqs = h.num_decode_seqs;
  b.num_seqs = h.num_seqs();
  b.num_tokens = h.num_tokens();
  b.max_seqlen_q = h.max_seqlen_q;
  b.max_seqlen_k = h.max_seqlen_k;
  const int64_t T = b.num_tokens, B = b.num_seqs;
  b.input_ids = upload_rows(backend_, m.input_ids, h.input_ids, T);
  b.positions = upload_rows(backend_, m.positions, h.positions, T);
  b.slot_mapping = upload_rows(backend_, m.slot_mapping, h.slot_mapping, T);
  b.cu_seqlens_q = upload_rows(backend_, m.cu_seqlens_q, h.cu_seqlens_q, B + 1);
  b.cu_seqlens_k = upload_rows(backend_, m.cu_seqlens_k, h.cu_seqlens_k, B + 1);
  b.context_lens = upload_rows(backend_, m.context_lens, h.context_lens, B);
  b.block_tables = upload_rows(backend_, m.block_tables, h.block_tables, B);
  b.last_token_indices = upload_rows(backend_, m.last_token_indices, h.last_token_indices, B);
  if (!sampling) return;
  b.temperatures = upload_rows(backend_, m.temperatures, h.temperatures, B);
  b.top_k = upload_rows(backend_, m.top_k, h.top_k, B);
  b.top_p = upload_rows(backend_, m.top_p, h.top_p, B);
  b.seeds = upload_rows(backend_, m.seeds, h.seeds, B);
  b.sample_offsets = upload_rows(backend_, m.sample_offsets, h.sample_offsets, B);
}

std::vector<int32_t> ModelRunner::execute(const std::vector<LayerKVCache>& kv_cache,
                                          int num_sampled) {
  Tensor logits;  // f32 [num_seqs, V] (tensor parallel: [num_seqs, V/tp])
  if (!batch_.is_prefill && graphs_.has(batch_.num_seqs)) {
    logits = graphs_.replay(batch_.num_seqs);
  } else {
    logits = model_->forward(batch_, kv_cache);
  }
  // Structured outputs: the grammar masks are computed while the device runs the forward just
  // launched (a CPU backend has finished it by now: no overlap there, nothing lost).
  if (!grammar_seqs_.empty()) {
    fill_grammar_masks(host_.sampling, grammar_seqs_);
    grammar_seqs_.clear();
  }
  if (tp_ > 1) {
    logits = gather_logits(logits, batch_.num_seqs, gathered_buf_, full_logits_buf_);
    if (comm_->rank() != 0) {  // rank 0 alone samples
      score_prompt_rows();
      return {};
    }
  }
  last_logits_ = logits.slice_rows(0, num_sampled);  // padded lanes dropped
  Tensor sampled = sampled_buf_.as(DType::I32, {num_sampled});
  backend_.sample(sampled, last_logits_, batch_);
  std::vector<int32_t> token_ids(static_cast<size_t>(num_sampled));
  backend_.download(token_ids.data(), sampled);
  score_prompt_rows();
  return token_ids;
}

void ModelRunner::score_prompt_rows() {
  prompt_logprobs_.clear();
  const std::vector<int32_t>& rows = host_.logit_rows;
  const bool root = tp_ == 1 || comm_->rank() == 0;
  std::vector<StepLogprobs> out;
  for (size_t g = 0; g < rows.size(); g += Qwen3Model::kMaxLogitRows) {
    const int n = int(std::min(rows.size() - g, size_t(Qwen3Model::kMaxLogitRows)));
    Tensor logits = model_->row_logits(rows.data() + g, n);  // f32 [n, V/tp]
    if (tp_ > 1) logits = gather_logits(logits, n, prompt_gathered_buf_, prompt_full_buf_);
    if (!root) continue;
    const std::vector<int32_t> targets(prompt_row_target_.begin() + int64_t(g), prompt_row_target_.begin() + int64_t(g) + n);
    const std::vector<int32_t> tops(prompt_row_top_.begin() + int64_t(g), prompt_row_top_.begin() + int64_t(g) + n);
    backend_.compute_logprobs(logits, targets, tops, out);
    for (int i = 0; i < n; ++i) prompt_logprobs_.emplace_back(prompt_row_seq_[g + size_t(i)], std::move(out[size_t(i)]));
  }
}

// Rank r's logits are the vocab ids [r V/tp, (r+1) V/tp): gathered to rank 0 as [tp, n, V/tp]
// (over the data communicator, on the device), then copied into the columns of [n, V].
Tensor ModelRunner::gather_logits(Tensor local, int n, Buffer& gathered_buf, Buffer& full_buf) {
  const int64_t vl = model_config_.vocab_size, chunk = int64_t(n) * vl;
  const bool root = comm_->rank() == 0;
  const size_t gathered_bytes = size_t(root ? tp_ * chunk : 1) * sizeof(float);
  if (gathered_buf.bytes() < gathered_bytes) gathered_buf = backend_.alloc(gathered_bytes);
  Tensor gathered = gathered_buf.as(DType::F32, {root ? tp_ * chunk : 1});
  data_comm_->gather(local.slice_rows(0, n).view({chunk}), gathered, 0,
                     std::vector<int64_t>(size_t(tp_), chunk));
  if (!root) return {};
  const size_t full_bytes = size_t(n) * size_t(vocab_size_) * sizeof(float);
  if (full_buf.bytes() < full_bytes) full_buf = backend_.alloc(full_bytes);
  Tensor full = full_buf.as(DType::F32, {int64_t(n), int64_t(vocab_size_)});
  for (int64_t r = 0; r < tp_; ++r) {
    Tensor part = gathered.slice_rows(r * chunk, (r + 1) * chunk).view({int64_t(n), vl});
    backend_.copy(full.slice_last(r * vl, (r + 1) * vl), part);
  }
  return full;
}

std::vector<int32_t> ModelRunner::run(const std::vector<Sequence*>& seqs, bool is_prefill,
                                      int num_decode_seqs) {
  const int n = int(seqs.size());
  NV_CHECK(is_prefill || num_decode_seqs == 0, "decodes are counted only in a mixed step");
  const auto t0 = std::chrono::steady_clock::now();
  const auto prepared = [&] {
    prepare_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (is_prefill) {
    prepare_prefill(seqs, num_decode_seqs);
  } else {
    prepare_decode(seqs, pad_decode_ ? bucket_for(buckets_, n) : n);
  }
  if (tp_ == 1) {
    upload();
    prepared();
    return execute(kv_cache_, n);
  }
  send_command(*comm_, TpCommand::kStep);
  try {
    broadcast_batch(*comm_, host_);
    upload();
    prepared();
    return execute(kv_cache_, n);
  } catch (const std::exception& e) {
    // The other ranks may be inside this step's collectives: the group cannot go on.
    comm_->abort(fmt::format("rank 0 failed a step: {}", e.what()));
    throw;
  }
}

void ModelRunner::serve_worker() {
  NV_CHECK(tp_ > 1 && comm_->rank() != 0, "serve_worker on rank 0 or without a group");
  while (wait_command(*comm_) == TpCommand::kStep) {
    broadcast_batch(*comm_, host_);
    upload(/*sampling=*/false);
    execute(kv_cache_, host_.num_seqs());
  }
}

}  // namespace nanovllm
