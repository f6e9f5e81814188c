#include "engine/tp_control.h"

#include "util/check.h"

namespace nanovllm {

void send_command(Communicator& comm, TpCommand command) {
  NV_CHECK(comm.rank() == 0, "rank {} sends a command", comm.rank());
  int32_t word = int32_t(command);
  comm.broadcast(Tensor::contiguous(&word, DType::I32, {1}), 0);
}

TpCommand wait_command(Communicator& comm) {
  const double timeout = comm.timeout_seconds();
  comm.set_timeout_seconds(1e9);  // ~30 years: no timeout while idle
  int32_t word = -1;
  try {
    comm.broadcast(Tensor::contiguous(&word, DType::I32, {1}), 0);
  } catch (...) {
    comm.set_timeout_seconds(timeout);
    throw;
  }
  comm.set_timeout_seconds(timeout);
  if (word != int32_t(TpCommand::kExit) && word != int32_t(TpCommand::kStep)) {
    fail("tensor-parallel rank {}: unknown command {} from rank 0", comm.rank(), word);
  }
  return TpCommand(word);
}

void broadcast_batch(Communicator& comm, HostBatch& h) {
  // Header: is_prefill, max_num_blocks, max_seqlen_q, max_seqlen_k, the 9 vector lengths, then
  // num_decode_seqs (a mixed step).
  constexpr int kFields = 9;
  std::vector<int32_t>* fields[kFields] = {&h.input_ids,    &h.positions,    &h.slot_mapping,
                                           &h.cu_seqlens_q, &h.cu_seqlens_k, &h.context_lens,
                                           &h.block_tables, &h.last_token_indices, &h.logit_rows};
  int32_t header[5 + kFields] = {h.is_prefill, h.max_num_blocks, h.max_seqlen_q, h.max_seqlen_k};
  for (int i = 0; i < kFields; ++i) header[4 + i] = int32_t(fields[i]->size());
  header[4 + kFields] = h.num_decode_seqs;
  comm.broadcast(Tensor::contiguous(header, DType::I32, {5 + kFields}), 0);
  h.is_prefill = header[0] != 0;
  h.num_decode_seqs = header[4 + kFields];
  h.max_num_blocks = header[1], h.max_seqlen_q = header[2], h.max_seqlen_k = header[3];
  int64_t total = 0;
  for (int i = 0; i < kFields; ++i) total += header[4 + i];
  std::vector<int32_t> flat;
  flat.reserve(size_t(total));
  if (comm.rank() == 0) {
    for (auto* f : fields) flat.insert(flat.end(), f->begin(), f->end());
  } else {
    flat.resize(size_t(total));
  }
  if (total > 0) comm.broadcast(Tensor::contiguous(flat.data(), DType::I32, {total}), 0);
  if (comm.rank() == 0) return;
  size_t pos = 0;
  for (int i = 0; i < kFields; ++i) {
    fields[i]->assign(flat.begin() + int64_t(pos), flat.begin() + int64_t(pos) + header[4 + i]);
    pos += size_t(header[4 + i]);
  }
}

}  // namespace nanovllm
