#pragma once
// Communicator: the collective and point-to-point primitives one rank of a group runs on tensors.
//
// Implementations (one object per rank; each rank calls every collective in the same order):
//   threads : ranks are threads of one process sharing a ThreadGroup (thread_communicator.h);
//             ring all-reduce, each rank moving 2N(p-1)/p bytes.
//   mpi     : one process per rank under mpirun (mpi_communicator.h); Open MPI's collectives.
//   nccl    : GPU collectives on a CUDA stream (nccl_communicator.h), bootstrapped over another
//             communicator (MPI or threads) that broadcasts NCCL's unique id.
//
// Rules shared by every implementation:
//   - Tensors are contiguous. threads/mpi take CPU tensors, nccl takes CUDA tensors.
//   - Reductions (reduce, all_reduce, reduce_scatter) support F32, BF16, I32 and I64; BF16 is
//     summed in fp32 and rounded to bf16 once per step of the algorithm. Data movement
//     (broadcast, scatter, gather, all_gather, all_to_all, send/recv) takes any dtype.
//   - Uneven sizes: the v-style primitives take `counts` (elements, one per rank, the same
//     vector on every rank); the chunk of rank r starts at the sum of counts[0..r). The
//     overloads without counts split evenly and require numel % world_size == 0.
//   - Context: threads/mpi run on the calling thread and return once the result is in place;
//     nccl enqueues on stream() and the result is ready in stream order (synchronize() waits).
//   - Failure: a peer that fails, leaves or stalls past timeout_seconds() makes every waiting
//     rank throw nanovllm::Error naming the peer and the primitive (threads), or ends the job
//     with that message (mpi: MPI_Abort, so mpirun stops every process). Never a hang.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace nanovllm {

enum class ReduceOp : uint8_t { Sum, Min, Max };
const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend_name() const = 0;  // "threads", "mpi", "nccl"
  // The algorithm a primitive uses, for bench-comm ("ring", "Open MPI tuned", ...).
  virtual std::string algorithm(const char* primitive) const = 0;
  // The stream the primitives are ordered on (cudaStream_t for nccl); nullptr: the caller.
  virtual void* stream() const { return nullptr; }
  virtual void synchronize() {}

  // x: same shape on every rank; on return every rank holds root's x.
  virtual void broadcast(Tensor x, int root) = 0;
  // send: root's [sum(counts)] split into chunks; recv: [counts[rank]]. send unused off root.
  virtual void scatter(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) = 0;
  // send: [counts[rank]]; recv on root: [sum(counts)], rank r's chunk at offset(r). recv unused
  // off root.
  virtual void gather(Tensor send, Tensor recv, int root, const std::vector<int64_t>& counts) = 0;
  // recv on root = op over ranks of send (same numel everywhere; send may alias recv).
  virtual void reduce(Tensor send, Tensor recv, int root, ReduceOp op = ReduceOp::Sum) = 0;
  // send: [counts[rank]]; recv: [sum(counts)] on every rank.
  virtual void all_gather(Tensor send, Tensor recv, const std::vector<int64_t>& counts) = 0;
  // send: [sum(counts)] on every rank; recv: [counts[rank]] = chunk `rank` of the reduction.
  virtual void reduce_scatter(Tensor send, Tensor recv, const std::vector<int64_t>& counts,
                              ReduceOp op = ReduceOp::Sum) = 0;
  // In place: x = op over ranks of x.
  virtual void all_reduce(Tensor x, ReduceOp op = ReduceOp::Sum) = 0;
  // send: chunks of send_counts[j] elements for rank j; recv: chunks of recv_counts[j] from
  // rank j. send_counts[j] on rank i must equal recv_counts[i] on rank j.
  virtual void all_to_all(Tensor send, Tensor recv, const std::vector<int64_t>& send_counts,
                          const std::vector<int64_t>& recv_counts) = 0;
  // Point to point; the receiver's x has the sender's numel and dtype. Messages between one
  // pair with one tag arrive in order.
  virtual void send(Tensor x, int peer, int tag = 0) = 0;
  virtual void recv(Tensor x, int peer, int tag = 0) = 0;
  virtual void barrier() = 0;
  // This rank gives up: every rank of the group stops with an Error naming this rank and
  // `reason` (threads), or the whole job ends (mpi: MPI_Abort). Called by a rank that cannot go
  // on (a shard that fails to load), so that its peers never wait for it.
  virtual void abort(const std::string& reason) = 0;

  // Even-split conveniences (numel divisible by world_size, else Error).
  void scatter(Tensor send, Tensor recv, int root);
  void gather(Tensor send, Tensor recv, int root);
  void all_gather(Tensor send, Tensor recv);
  void reduce_scatter(Tensor send, Tensor recv, ReduceOp op = ReduceOp::Sum);
  void all_to_all(Tensor send, Tensor recv);

  // Seconds a rank waits for its peers before the group is failed (threads and mpi).
  double timeout_seconds() const { return timeout_seconds_; }
  void set_timeout_seconds(double s) { timeout_seconds_ = s; }

 protected:
  double timeout_seconds_ = 300.0;
};

// Validation shared by the implementations (throw Error naming the primitive and the tensor).
namespace comm_detail {
void check_tensor(const char* primitive, const char* what, const Tensor& t, DeviceKind device);
void check_reducible(const char* primitive, DType dtype);
void check_counts(const char* primitive, const std::vector<int64_t>& counts, int world_size);
void check_root(const char* primitive, int root, int world_size);
void check_numel(const char* primitive, const char* what, const Tensor& t, int64_t numel);
std::vector<int64_t> offsets(const std::vector<int64_t>& counts);  // [p + 1], first 0
std::vector<int64_t> even_counts(const char* primitive, int64_t numel, int world_size);
// dst[i] = op(dst[i], src[i]) for n elements of dtype (bf16 summed in fp32, rounded once).
void reduce_into(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op);
}  // namespace comm_detail

}  // namespace nanovllm
