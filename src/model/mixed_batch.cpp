#include "model/mixed_batch.h"

#include <algorithm>

#include "util/check.h"

namespace nanovllm {

namespace {

// dst = src[begin, end) + add
void take(std::vector<int32_t>& dst, const std::vector<int32_t>& src, size_t begin, size_t end,
          int32_t add = 0) {
  NV_CHECK(begin <= end && end <= src.size(), "[{}, {}) of {} values", begin, end, src.size());
  dst.assign(src.begin() + int64_t(begin), src.begin() + int64_t(end));
  if (add != 0)
    for (int32_t& x : dst) x += add;
}

}  // namespace

void MixedBatch::reserve(Backend& backend, int max_seqs) {
  const int64_t B = max_seqs;
  buf_ = backend.alloc(size_t(4 * (3 * B + 2) + 3 * 64));
  char* cursor = static_cast<char*>(buf_.data());
  const DeviceKind dev = backend.device();
  for (auto [t, n] : {std::pair{&cu_q_, B + 1}, std::pair{&cu_k_, B + 1}, std::pair{&last_, B}}) {
    *t = Tensor::contiguous(cursor, DType::I32, {n}, dev);
    cursor += (n * 4 + 63) / 64 * 64;
  }
}

void MixedBatch::split(Backend& backend, const ForwardBatch& batch) {
  NV_CHECK(batch.host != nullptr, "a mixed step needs ForwardBatch::host");
  const HostBatch& h = *batch.host;
  const int nd = batch.num_decode_seqs, B = batch.num_seqs, T = batch.num_tokens;
  NV_CHECK(batch.is_prefill && 0 < nd && nd < B && h.num_seqs() == B && h.num_tokens() == T &&
               B <= int(last_.numel()),
           "mixed step: {} decodes of {} seqs, {} tokens", nd, B, T);
  const size_t W = size_t(h.max_num_blocks);

  HostBatch& d = decode_host_;
  d.is_prefill = false;
  d.num_decode_seqs = 0;
  take(d.input_ids, h.input_ids, 0, size_t(nd));
  take(d.positions, h.positions, 0, size_t(nd));
  take(d.slot_mapping, h.slot_mapping, 0, size_t(nd));
  take(d.cu_seqlens_q, h.cu_seqlens_q, 0, size_t(nd) + 1);
  take(d.cu_seqlens_k, h.cu_seqlens_k, 0, size_t(nd) + 1);
  take(d.context_lens, h.context_lens, 0, size_t(nd));
  take(d.block_tables, h.block_tables, 0, size_t(nd) * W);
  take(d.last_token_indices, h.last_token_indices, 0, size_t(nd));
  NV_CHECK(d.cu_seqlens_q[size_t(nd)] == nd, "the {} leading decodes hold {} tokens", nd,
           d.cu_seqlens_q[size_t(nd)]);
  d.max_num_blocks = h.max_num_blocks;
  d.max_seqlen_q = 1;
  d.max_seqlen_k = *std::max_element(d.context_lens.begin(), d.context_lens.end());

  HostBatch& p = prefill_host_;
  p.is_prefill = true;
  p.num_decode_seqs = 0;
  take(p.input_ids, h.input_ids, size_t(nd), size_t(T));
  take(p.positions, h.positions, size_t(nd), size_t(T));
  take(p.slot_mapping, h.slot_mapping, size_t(nd), size_t(T));
  take(p.cu_seqlens_q, h.cu_seqlens_q, size_t(nd), size_t(B) + 1, -nd);
  take(p.cu_seqlens_k, h.cu_seqlens_k, size_t(nd), size_t(B) + 1, -h.cu_seqlens_k[size_t(nd)]);
  take(p.context_lens, h.context_lens, size_t(nd), size_t(B));
  take(p.block_tables, h.block_tables, size_t(nd) * W, size_t(B) * W);
  take(p.last_token_indices, h.last_token_indices, size_t(nd), size_t(B), -nd);
  p.max_num_blocks = h.max_num_blocks;
  p.max_seqlen_q = p.max_seqlen_k = 0;
  for (int b = 0; b < B - nd; ++b) {
    p.max_seqlen_q = std::max(p.max_seqlen_q, p.cu_seqlens_q[size_t(b) + 1] - p.cu_seqlens_q[size_t(b)]);
    p.max_seqlen_k = std::max(p.max_seqlen_k, p.context_lens[size_t(b)]);
  }

  const int np = B - nd;
  ForwardBatch& db = decode_;
  db = ForwardBatch{};
  db.host = &d;
  db.is_prefill = false;
  db.num_seqs = db.num_tokens = nd;
  db.max_seqlen_q = 1;
  db.max_seqlen_k = d.max_seqlen_k;
  db.input_ids = batch.input_ids.slice_rows(0, nd);
  db.positions = batch.positions.slice_rows(0, nd);
  db.slot_mapping = batch.slot_mapping.slice_rows(0, nd);
  db.cu_seqlens_q = batch.cu_seqlens_q.slice_rows(0, nd + 1);
  db.cu_seqlens_k = batch.cu_seqlens_k.slice_rows(0, nd + 1);
  db.context_lens = batch.context_lens.slice_rows(0, nd);
  db.block_tables = batch.block_tables.slice_rows(0, nd);
  db.last_token_indices = batch.last_token_indices.slice_rows(0, nd);

  ForwardBatch& pb = prefill_;
  pb = ForwardBatch{};
  pb.host = &p;
  pb.is_prefill = true;
  pb.num_seqs = np;
  pb.num_tokens = T - nd;
  pb.max_seqlen_q = p.max_seqlen_q;
  pb.max_seqlen_k = p.max_seqlen_k;
  pb.input_ids = batch.input_ids.slice_rows(nd, T);
  pb.positions = batch.positions.slice_rows(nd, T);
  pb.slot_mapping = batch.slot_mapping.slice_rows(nd, T);
  pb.cu_seqlens_q = cu_q_.slice_rows(0, np + 1);
  pb.cu_seqlens_k = cu_k_.slice_rows(0, np + 1);
  pb.last_token_indices = last_.slice_rows(0, np);
  backend.upload(pb.cu_seqlens_q, p.cu_seqlens_q.data());
  backend.upload(pb.cu_seqlens_k, p.cu_seqlens_k.data());
  backend.upload(pb.last_token_indices, p.last_token_indices.data());
  pb.context_lens = batch.context_lens.slice_rows(nd, B);
  pb.block_tables = batch.block_tables.slice_rows(nd, B);
}

}  // namespace nanovllm
