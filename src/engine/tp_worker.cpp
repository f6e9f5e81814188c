#include "engine/tp_worker.h"

#include <cstring>

#include "model/safetensors.h"
#include "model/tp_shard.h"

namespace nanovllm {

namespace {

Tensor host_i32(const std::vector<int32_t>& v) {
  return Tensor::contiguous(const_cast<int32_t*>(v.data()), DType::I32, {int64_t(v.size())});
}

// The CPU backend reads host memory: the batch's tensors are views of the HostBatch vectors.
ForwardBatch host_forward_batch(const HostBatch& h) {
  ForwardBatch b;
  b.host = &h;
  b.is_prefill = h.is_prefill;
  b.num_decode_seqs = h.num_decode_seqs;
  b.num_seqs = h.num_seqs();
  b.num_tokens = h.num_tokens();
  b.max_seqlen_q = h.max_seqlen_q;
  b.max_seqlen_k = h.max_seqlen_k;
  b.input_ids = host_i32(h.input_ids);
  b.positions = host_i32(h.positions);
  b.slot_mapping = host_i32(h.slot_mapping);
  b.cu_seqlens_q = host_i32(h.cu_seqlens_q);
  b.cu_seqlens_k = host_i32(h.cu_seqlens_k);
  b.context_lens = host_i32(h.context_lens);
  b.block_tables = Tensor::contiguous(const_cast<int32_t*>(h.block_tables.data()), DType::I32,
                                      {int64_t(b.num_seqs), int64_t(h.max_num_blocks)});
  b.last_token_indices = host_i32(h.last_token_indices);
  return b;
}

}  // namespace

TpWorker::TpWorker(const TpWorkerOptions& o, Communicator& comm, Backend& backend)
    : options_(o), comm_(comm), backend_(backend) {
  if (backend.device() != DeviceKind::CPU) fail("TpWorker: only the CPU backend is wired so far");
  const int tp = comm.world_size();
  try {
    full_ = load_model_config(o.model);
    local_ = shard_config(full_, tp);  // Error on every rank alike: nothing read yet
    Checkpoint ckpt(o.model);
    ModelWeights w = load_weights_shard(ckpt, full_, {comm.rank(), tp}, backend);
    model_ = std::make_unique<Qwen3Model>(local_, std::move(w), backend, o.max_position);
    model_->reserve(o.max_tokens, o.max_seqs);
  } catch (const std::exception& e) {
    comm.abort(fmt::format("tensor-parallel rank {} failed to load {}: {}", comm.rank(), o.model, e.what()));
    throw;
  }
  backend.set_communicator(&comm);
  // KV cache: [2, layers, blocks, block_size, Hkv_local, D] bf16; blocks agreed by MIN.
  const int64_t L = local_.num_hidden_layers, hkv = local_.num_key_value_heads, D = local_.head_dim;
  const int64_t per_block = 2 * L * o.block_size * hkv * D * 2;
  int64_t blocks = o.kv_cache_bytes / per_block;
  comm.all_reduce(Tensor::contiguous(&blocks, DType::I64, {1}), ReduceOp::Min);
  if (blocks < 1) fail("TpWorker: a KV budget of {} bytes holds no block of {} bytes", o.kv_cache_bytes, per_block);
  num_blocks_ = blocks;
  const size_t layer_bytes = size_t(blocks * o.block_size * hkv * D) * 2;
  kv_buffer_ = backend.alloc(layer_bytes * size_t(2 * L));
  backend.fill_zero(kv_buffer_.as(DType::I32, {int64_t(kv_buffer_.bytes() / 4)}));
  char* base = static_cast<char*>(kv_buffer_.data());
  for (int64_t l = 0; l < L; ++l) {
    LayerKVCache c;
    c.k = Tensor::contiguous(base + size_t(l) * layer_bytes, DType::BF16, {blocks, o.block_size, hkv, D});
    c.v = Tensor::contiguous(base + size_t(L + l) * layer_bytes, DType::BF16, {blocks, o.block_size, hkv, D});
    c.sliding_window = local_.layer_sliding_window(int(l));
    kv_cache_.push_back(c);
  }
}

std::vector<float> TpWorker::forward(const HostBatch& h) {
  ForwardBatch batch = host_forward_batch(h);
  Tensor logits = model_->forward(batch, kv_cache_);  // f32 [B, V/tp]
  const int64_t B = batch.num_seqs, vl = local_.vocab_size, tp = comm_.world_size();
  local_logits_.resize(size_t(B * vl));
  backend_.download(local_logits_.data(), logits);
  const bool root = comm_.rank() == 0;
  gathered_.resize(root ? size_t(tp * B * vl) : 1);
  comm_.gather(Tensor::contiguous(local_logits_.data(), DType::F32, {B * vl}),
               Tensor::contiguous(gathered_.data(), DType::F32, {root ? tp * B * vl : 1}), 0,
               std::vector<int64_t>(size_t(tp), B * vl));
  if (!root) return {};
  // [tp, B, V/tp] -> [B, V]: rank r's rows are the vocab ids [r V/tp, (r+1) V/tp).
  std::vector<float> out(size_t(B * vl * tp));
  for (int64_t r = 0; r < tp; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(&out[size_t(b * vl * tp + r * vl)], &gathered_[size_t((r * B + b) * vl)], size_t(vl) * 4);
    }
  }
  return out;
}

}  // namespace nanovllm
