// ModelRunner's start-up after the weights: warm-up, KV cache sizing and allocation, graph
// capture (nano-vllm's warmup_model, allocate_kv_cache, capture_cudagraph).
#include <algorithm>
#include <string>

#include "engine/model_runner.h"

namespace nanovllm {

namespace {

// k and v of every layer over a buffer of num_blocks blocks:
// [2, layers, num_blocks, block_size, Hkv, D] of format.dtype, with the layers' scales.
std::vector<LayerKVCache> kv_views(const Buffer& buf, const ModelConfig& mc, int64_t num_blocks,
                                   int64_t block_size, DeviceKind device,
                                   const KvCacheFormat& format) {
  const int64_t L = mc.num_hidden_layers, Hkv = mc.num_key_value_heads, D = mc.head_dim;
  const size_t per_layer =  // bytes of k of a layer
      size_t(num_blocks * block_size * Hkv * D) * dtype_size(format.dtype);
  char* base = static_cast<char*>(buf.data());
  std::vector<LayerKVCache> views;
  for (int64_t l = 0; l < L; ++l) {
    LayerKVCache c;
    c.k = Tensor::contiguous(base + size_t(l) * per_layer, format.dtype,
                             {num_blocks, block_size, Hkv, D}, device);
    c.v = Tensor::contiguous(base + size_t(L + l) * per_layer, format.dtype,
                             {num_blocks, block_size, Hkv, D}, device);
    c.k_scale = format.k_scale[size_t(l)];
    c.v_scale = format.v_scale[size_t(l)];
    c.sliding_window = mc.layer_sliding_window(int(l));
    views.push_back(c);
  }
  return views;
}

std::unique_ptr<Sequence> warmup_sequence(int num_tokens, int block_size) {
  ResolvedSampling greedy;
  greedy.temperature = 0.0f;
  auto seq = std::make_unique<Sequence>(-1, std::vector<int32_t>(size_t(num_tokens), 0), greedy,
                                        block_size);
  for (int i = 0; i < seq->num_blocks(); ++i) seq->block_table.push_back(i);  // all share them
  return seq;
}

}  // namespace

// Runs the largest steps the engine can schedule, so that a backend allocates whatever it
// allocates lazily (GEMM algorithms and workspaces, attention scratch) before the KV cache takes
// the rest of the memory: a prefill of max_num_batched_tokens tokens in sequences of up to
// max_model_len tokens, then a decode of max_num_seqs sequences of that length. They run over a
// temporary zeroed cache of one sequence's blocks that every sequence shares, write nothing
// (slot -1) and sample greedily.
void ModelRunner::warmup_model() {
  const int bs = config_.block_size;
  const int len = std::min(config_.max_num_batched_tokens, config_.max_model_len);
  const int64_t nb = (len + bs - 1) / bs;
  Buffer temp = backend_.alloc(kv_block_bytes() * size_t(nb));
  backend_.fill_zero(temp.as(DType::I32, {int64_t(temp.bytes() / 4)}));
  std::vector<LayerKVCache> cache = kv_views(temp, model_config_, nb, bs, backend_.device(), kv_format_);

  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> seqs;
  for (int left = config_.max_num_batched_tokens;
       left > 0 && int(seqs.size()) < config_.max_num_seqs; left -= len) {
    owned.push_back(warmup_sequence(len, bs));
    owned.back()->num_scheduled_tokens = std::min(left, len);
    seqs.push_back(owned.back().get());
  }
  prepare_prefill(seqs);
  std::fill(host_.slot_mapping.begin(), host_.slot_mapping.end(), -1);
  upload();
  execute(cache, int(seqs.size()));

  owned.clear();
  seqs.clear();
  for (int i = 0; i < config_.max_num_seqs; ++i) {
    owned.push_back(warmup_sequence(len, bs));
    seqs.push_back(owned.back().get());
  }
  prepare_decode(seqs, config_.max_num_seqs);
  std::fill(host_.slot_mapping.begin(), host_.slot_mapping.end(), -1);
  upload();
  execute(cache, int(seqs.size()));
  backend_.synchronize();
}

void ModelRunner::allocate_kv_cache() {
  const int64_t block_bytes = int64_t(kv_block_bytes());
  int64_t budget = config_.kv_cache_memory;
  std::string source = "--kv-cache-memory";
  if (budget <= 0) {
    const DeviceMemory mem = backend_.memory_info();
    const bool cpu = backend_.device() == DeviceKind::CPU;
    budget = default_kv_cache_bytes(backend_.device(), mem, config_.gpu_memory_utilization,
                                     cpu ? reserved_bytes() : 0);
    source = cpu ? fmt::format("the CPU default: half of the {} bytes of MemAvailable left after "
                               "{} bytes of buffers, at most {}", mem.free_bytes, reserved_bytes(),
                               int64_t(4) << 30)
                 : fmt::format("--gpu-memory-utilization {} of {} bytes, {} in use",
                               config_.gpu_memory_utilization, mem.total_bytes,
                               mem.total_bytes - mem.free_bytes);
  }
  // Tensor parallel: the budget is the engine's, shared by its ranks (each holds 1/tp of the KV
  // heads), and every rank takes the smallest count any rank can hold.
  if (tp_ > 1) {
    budget /= tp_;
    source += fmt::format(", split over {} ranks", tp_);
  }
  int64_t blocks = std::min<int64_t>(budget / block_bytes, 1 << 30);
  if (tp_ > 1) comm_->all_reduce(Tensor::contiguous(&blocks, DType::I64, {1}), ReduceOp::Min);
  num_blocks_ = int(blocks);
  // One sequence at its longest holds KV for max_model_len - 1 tokens (the last sampled token is
  // never computed), as Scheduler::add counts.
  const int bs = config_.block_size;
  const int need = (config_.max_model_len - 1 + bs - 1) / bs;
  if (num_blocks_ < need) {
    const std::string lower =
        num_blocks_ >= 1 ? fmt::format("lower --max-model-len to at most {}, or ",
                                       int64_t(num_blocks_) * bs + 1)
                         : std::string();
    fail("the KV cache cannot hold one sequence of max_model_len {} tokens: that needs {} blocks "
         "of {} tokens ({} bytes each, {} bytes in all), but the cache gets {} bytes ({}), i.e. {} "
         "blocks. {}give the cache more memory with --kv-cache-memory{}",
         config_.max_model_len, need, bs, block_bytes, int64_t(need) * block_bytes, budget, source,
         num_blocks_, lower,
         backend_.device() == DeviceKind::CPU ? "" : " or --gpu-memory-utilization");
  }
  kv_cache_buf_ = backend_.alloc(size_t(block_bytes) * size_t(num_blocks_));
  kv_cache_ = kv_views(kv_cache_buf_, model_config_, num_blocks_, bs, backend_.device(), kv_format_);
  if (config_.kv_cache_prefault) {  // every page written now (zeros: finite everywhere)
    backend_.fill_zero(kv_cache_buf_.as(DType::I32, {int64_t(kv_cache_buf_.bytes() / 4)}));
    return;
  }
  // Padded decode lanes read key 0 of block 0: keep it finite from the start.
  for (const LayerKVCache& c : kv_cache_) {
    backend_.fill_zero(c.k.slice_rows(0, 1));
    backend_.fill_zero(c.v.slice_rows(0, 1));
  }
}

void ModelRunner::capture_graphs() {
  auto prepare = [this](int bucket) {
    prepare_decode({}, bucket);
    upload();
    batch_.max_seqlen_k = config_.max_model_len;  // an upper bound for every replay
    return batch_;
  };
  auto forward = [this](const ForwardBatch& batch) { return model_->forward(batch, kv_cache_); };
  Tensor probe = sampled_buf_.as(DType::I32, {1});
  if (graphs_.capture(backend_, buckets_, prepare, forward, probe)) pad_decode_ = true;
}

}  // namespace nanovllm
