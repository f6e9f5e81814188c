#include "engine/model_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "model/safetensors.h"
#include "model/weights.h"

namespace nanovllm {

int64_t default_cpu_kv_cache_bytes() {
  int64_t pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int64_t quarter = pages > 0 && page > 0 ? pages * page / 4 : (int64_t(1) << 30);
  return std::min<int64_t>(int64_t(4) << 30, quarter);
}

ModelRunner::ModelRunner(const Config& config, const ModelConfig& model_config, Backend& backend)
    : config_(config), model_config_(model_config), backend_(backend) {
  Checkpoint checkpoint(config.model);
  model_ = std::make_unique<Qwen3Model>(model_config, load_weights(checkpoint, model_config, backend),
                                        backend, config.max_model_len);
  int64_t budget = config.kv_cache_memory;
  if (budget <= 0) budget = default_cpu_kv_cache_bytes();
  allocate_kv_cache(budget);
  sampled_buf_ = backend.alloc(sizeof(int32_t) * size_t(config.max_num_seqs));
}

size_t ModelRunner::kv_block_bytes() const {
  return 2 * size_t(model_config_.num_hidden_layers) * size_t(config_.block_size) *
         size_t(model_config_.num_key_value_heads) * size_t(model_config_.head_dim) * 2;
}

void ModelRunner::allocate_kv_cache(int64_t budget_bytes) {
  num_blocks_ = int(std::min<int64_t>(budget_bytes / int64_t(kv_block_bytes()), 1 << 30));
  if (num_blocks_ < 1) {
    fail("kv_cache_memory {} bytes holds no KV block ({} bytes each with block_size {})",
         budget_bytes, kv_block_bytes(), config_.block_size);
  }
  kv_cache_buf_ = backend_.alloc(kv_block_bytes() * size_t(num_blocks_));
  const int64_t L = model_config_.num_hidden_layers, N = num_blocks_, S = config_.block_size;
  const int64_t Hkv = model_config_.num_key_value_heads, D = model_config_.head_dim;
  const size_t per_layer = size_t(N * S * Hkv * D) * 2;  // bytes of k (or v) of one layer
  char* base = static_cast<char*>(kv_cache_buf_.data());
  for (int64_t l = 0; l < L; ++l) {
    LayerKVCache c;
    c.k = Tensor::contiguous(base + size_t(l) * per_layer, DType::BF16, {N, S, Hkv, D},
                             backend_.device());
    c.v = Tensor::contiguous(base + size_t(L + l) * per_layer, DType::BF16, {N, S, Hkv, D},
                             backend_.device());
    kv_cache_.push_back(c);
  }
}

HostBatch ModelRunner::prepare_prefill(const std::vector<Sequence*>& seqs) const {
  HostBatch b;
  b.is_prefill = true;
  b.cu_seqlens_q.push_back(0);
  b.cu_seqlens_k.push_back(0);
  for (const Sequence* seq : seqs) {
    const int start = seq->num_cached_tokens;
    const int end = start + seq->num_scheduled_tokens;
    NV_CHECK(seq->num_scheduled_tokens > 0 && end <= seq->num_tokens());
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
  prepare_block_tables(b, seqs);
  prepare_sample(b, seqs);
  return b;
}

HostBatch ModelRunner::prepare_decode(const std::vector<Sequence*>& seqs) const {
  HostBatch b;
  b.is_prefill = false;
  b.cu_seqlens_q.push_back(0);
  b.cu_seqlens_k.push_back(0);
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
  prepare_block_tables(b, seqs);
  prepare_sample(b, seqs);
  return b;
}

// block_tables [num_seqs, max_num_blocks], each row padded with -1.
void ModelRunner::prepare_block_tables(HostBatch& b, const std::vector<Sequence*>& seqs) const {
  b.max_num_blocks = 0;
  for (const Sequence* seq : seqs) b.max_num_blocks = std::max(b.max_num_blocks, int(seq->block_table.size()));
  for (const Sequence* seq : seqs) {
    b.block_tables.insert(b.block_tables.end(), seq->block_table.begin(), seq->block_table.end());
    b.block_tables.resize(b.block_tables.size() + b.max_num_blocks - seq->block_table.size(), -1);
  }
}

void ModelRunner::prepare_sample(HostBatch& b, const std::vector<Sequence*>& seqs) const {
  for (const Sequence* seq : seqs) {
    b.temperatures.push_back(seq->sampling.temperature);
    b.top_k.push_back(seq->sampling.top_k);
    b.top_p.push_back(seq->sampling.top_p);
    b.seeds.push_back(seq->sampling.seed);
    b.sample_offsets.push_back(seq->num_tokens());
  }
}

namespace {

// Appends `v` to the metadata image (64-byte aligned) and makes *dst its view; the data pointer
// is set once the image is on the device (fixups).
template <typename T>
void place(std::vector<char>& image, std::vector<std::pair<size_t, Tensor*>>& fixups,
           const std::vector<T>& v, DType dtype, std::initializer_list<int64_t> shape, Tensor* dst) {
  size_t offset = (image.size() + 63) / 64 * 64;
  image.resize(offset + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(image.data() + offset, v.data(), v.size() * sizeof(T));
  *dst = Tensor::contiguous(nullptr, dtype, shape);
  fixups.emplace_back(offset, dst);
}

}  // namespace

ForwardBatch ModelRunner::upload(const HostBatch& h) {
  ForwardBatch b;
  b.host = &h;
  b.is_prefill = h.is_prefill;
  b.num_seqs = h.num_seqs();
  b.num_tokens = h.num_tokens();
  b.max_seqlen_q = h.max_seqlen_q;
  b.max_seqlen_k = h.max_seqlen_k;
  const int64_t T = b.num_tokens, B = b.num_seqs;
  std::vector<char> image;
  std::vector<std::pair<size_t, Tensor*>> fixups;
  place(image, fixups, h.input_ids, DType::I32, {T}, &b.input_ids);
  place(image, fixups, h.positions, DType::I32, {T}, &b.positions);
  place(image, fixups, h.slot_mapping, DType::I32, {T}, &b.slot_mapping);
  place(image, fixups, h.cu_seqlens_q, DType::I32, {B + 1}, &b.cu_seqlens_q);
  place(image, fixups, h.cu_seqlens_k, DType::I32, {B + 1}, &b.cu_seqlens_k);
  place(image, fixups, h.context_lens, DType::I32, {B}, &b.context_lens);
  place(image, fixups, h.block_tables, DType::I32, {B, h.max_num_blocks}, &b.block_tables);
  place(image, fixups, h.last_token_indices, DType::I32, {B}, &b.last_token_indices);
  place(image, fixups, h.temperatures, DType::F32, {B}, &b.temperatures);
  place(image, fixups, h.top_k, DType::I32, {B}, &b.top_k);
  place(image, fixups, h.top_p, DType::F32, {B}, &b.top_p);
  place(image, fixups, h.seeds, DType::I64, {B}, &b.seeds);
  place(image, fixups, h.sample_offsets, DType::I64, {B}, &b.sample_offsets);
  if (metadata_buf_.bytes() < image.size()) metadata_buf_ = backend_.alloc(image.size() * 2);
  backend_.upload(Tensor::contiguous(metadata_buf_.data(), DType::I32 /*bytes*/,
                                     {int64_t(image.size() / 4)}, backend_.device()),
                  image.data());
  for (auto& [offset, t] : fixups) {
    t->data = static_cast<char*>(metadata_buf_.data()) + offset;
    t->device = backend_.device();
  }
  return b;
}

std::vector<int32_t> ModelRunner::run(const std::vector<Sequence*>& seqs, bool is_prefill) {
  HostBatch host = is_prefill ? prepare_prefill(seqs) : prepare_decode(seqs);
  ForwardBatch batch = upload(host);
  Tensor logits = model_->forward(batch, kv_cache_);  // f32 [B, V]
  last_logits_ = logits;
  Tensor sampled = sampled_buf_.as(DType::I32, {batch.num_seqs});
  backend_.sample(sampled, logits, batch);
  std::vector<int32_t> token_ids(size_t(batch.num_seqs));
  backend_.download(token_ids.data(), sampled);
  return token_ids;
}

}  // namespace nanovllm
