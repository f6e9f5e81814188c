// The CUDA emulator's NCCL (see include/nccl.h): ranks are threads; every call (or group) is a
// rendezvous of the communicator's ranks, and the last rank to arrive carries out all of their
// operations on the emulated devices' memory.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl.h"
#include "runtime/tensor.h"

namespace nanovllm::cuda_emu {

namespace {

[[noreturn]] void die(const std::string& msg) { emu::die("NCCL: " + msg); }

// memcpy that accepts empty (possibly null) ranges.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

enum class Kind { Send, Recv, Broadcast, Reduce, AllReduce, AllGather, ReduceScatter };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Send:
      return "ncclSend";
    case Kind::Recv:
      return "ncclRecv";
    case Kind::Broadcast:
      return "ncclBroadcast";
    case Kind::Reduce:
      return "ncclReduce";
    case Kind::AllReduce:
      return "ncclAllReduce";
    case Kind::AllGather:
      return "ncclAllGather";
    case Kind::ReduceScatter:
      return "ncclReduceScatter";
  }
  return "?";
}

struct Op {
  Kind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclUint8;
  ncclRedOp_t op = ncclSum;
  int peer = 0;  // send/recv: the peer; broadcast/reduce: the root
};

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

double load(const void* p, ncclDataType_t t, size_t i) {
  switch (t) {
    case ncclInt8:
      return static_cast<const int8_t*>(p)[i];
    case ncclUint8:
      return static_cast<const uint8_t*>(p)[i];
    case ncclInt32:
      return static_cast<const int32_t*>(p)[i];
    case ncclUint32:
      return static_cast<const uint32_t*>(p)[i];
    case ncclInt64:
      return double(static_cast<const int64_t*>(p)[i]);
    case ncclUint64:
      return double(static_cast<const uint64_t*>(p)[i]);
    case ncclFloat16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case ncclFloat32:
      return static_cast<const float*>(p)[i];
    case ncclFloat64:
      return static_cast<const double*>(p)[i];
    case ncclBfloat16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0;
}

// Rounds once to the element type (floats through f32, as a GPU reduction of f32 partials).
void store(void* p, ncclDataType_t t, size_t i, double v) {
  switch (t) {
    case ncclInt8:
      static_cast<int8_t*>(p)[i] = int8_t(v);
      return;
    case ncclUint8:
      static_cast<uint8_t*>(p)[i] = uint8_t(v);
      return;
    case ncclInt32:
      static_cast<int32_t*>(p)[i] = int32_t(v);
      return;
    case ncclUint32:
      static_cast<uint32_t*>(p)[i] = uint32_t(v);
      return;
    case ncclInt64:
      static_cast<int64_t*>(p)[i] = int64_t(v);
      return;
    case ncclUint64:
      static_cast<uint64_t*>(p)[i] = uint64_t(v);
      return;
    case ncclFloat16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v));
      return;
    case ncclFloat32:
      static_cast<float*>(p)[i] = float(v);
      return;
    case ncclFloat64:
      static_cast<double*>(p)[i] = v;
      return;
    case ncclBfloat16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v));
      return;
  }
}

double combine(ncclRedOp_t op, double a, double b) {
  switch (op) {
    case ncclSum:
      return a + b;
    case ncclProd:
      return a * b;
    case ncclMax:
      return a < b ? b : a;
    case ncclMin:
      return b < a ? b : a;
  }
  return a;
}

// The communicator shared by the ranks of one unique id.
struct Clique {
  explicit Clique(int n) : nranks(n), pending(size_t(n)) {}
  const int nranks;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t round = 0;
  int arrived = 0;
  bool aborted = false;
  std::vector<std::vector<Op>> pending;  // this round's operations, per rank

  // Carries out every rank's collectives of this round (called by the last rank to arrive).
  void execute() {
    for (int r = 1; r < nranks; ++r)
      if (pending[size_t(r)].size() != pending[0].size())
        die("ranks 0 and " + std::to_string(r) + " issued different numbers of collectives (" +
            std::to_string(pending[0].size()) + " and " +
            std::to_string(pending[size_t(r)].size()) + ") in one call or group");
    for (size_t i = 0; i < pending[0].size(); ++i) {
      std::vector<const Op*> ops;
      for (int r = 0; r < nranks; ++r) ops.push_back(&pending[size_t(r)][i]);
      collective(ops);
    }
  }

  void collective(const std::vector<const Op*>& ops) {
    const Op& a = *ops[0];
    for (int r = 1; r < nranks; ++r) {
      const Op& b = *ops[size_t(r)];
      if (b.kind != a.kind || b.count != a.count || b.type != a.type || b.op != a.op ||
          b.peer != a.peer)
        die(std::string("collective mismatch: rank 0 called ") + kind_name(a.kind) + " (count " +
            std::to_string(a.count) + ", root " + std::to_string(a.peer) + "), rank " +
            std::to_string(r) + " " + kind_name(b.kind) + " (count " + std::to_string(b.count) +
            ", root " + std::to_string(b.peer) + ")");
    }
    const size_t n = a.count, es = type_bytes(a.type);
    auto reduce_from = [&](size_t offset) {
      std::vector<double> acc(n);
      for (size_t i = 0; i < n; ++i) acc[i] = load(ops[0]->send, a.type, offset + i);
      for (int r = 1; r < nranks; ++r)
        for (size_t i = 0; i < n; ++i)
          acc[i] = combine(a.op, acc[i], load(ops[size_t(r)]->send, a.type, offset + i));
      return acc;
    };
    switch (a.kind) {
      case Kind::AllReduce: {
        const std::vector<double> acc = reduce_from(0);
        for (int r = 0; r < nranks; ++r)
          for (size_t i = 0; i < n; ++i) store(ops[size_t(r)]->recv, a.type, i, acc[i]);
        break;
      }
      case Kind::Reduce: {
        const std::vector<double> acc = reduce_from(0);
        for (size_t i = 0; i < n; ++i) store(ops[size_t(a.peer)]->recv, a.type, i, acc[i]);
        break;
      }
      case Kind::ReduceScatter: {
        std::vector<std::vector<double>> parts;
        for (int r = 0; r < nranks; ++r) parts.push_back(reduce_from(size_t(r) * n));
        for (int r = 0; r < nranks; ++r)
          for (size_t i = 0; i < n; ++i)
            store(ops[size_t(r)]->recv, a.type, i, parts[size_t(r)][i]);
        break;
      }
      case Kind::Broadcast: {
        const std::vector<char> src(static_cast<const char*>(ops[size_t(a.peer)]->send),
                                    static_cast<const char*>(ops[size_t(a.peer)]->send) + n * es);
        for (int r = 0; r < nranks; ++r) copy_bytes(ops[size_t(r)]->recv, src.data(), n * es);
        break;
      }
      case Kind::AllGather: {
        std::vector<char> all(size_t(nranks) * n * es);
        for (int r = 0; r < nranks; ++r)
          copy_bytes(all.data() + size_t(r) * n * es, ops[size_t(r)]->send, n * es);
        for (int r = 0; r < nranks; ++r) copy_bytes(ops[size_t(r)]->recv, all.data(), all.size());
        break;
      }
      default:
        break;
    }
  }

  // Point to point: a send leaves its bytes in the (src, dst) channel at once (NCCL with enough
  // buffering); a receive takes the channel's oldest message, waiting for it.
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> channels;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<Clique>> cliques;
  std::atomic<uint64_t> next_id{1};
};

Registry& registry() {
  static Registry r;
  return r;
}

thread_local int tl_group_depth = 0;

}  // namespace

struct EmuNcclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  ncclResult_t async_error = ncclSuccess;
  std::vector<Op> group_ops;
  cudaStream_t group_stream = nullptr;
};

namespace {

thread_local std::vector<EmuNcclComm*> tl_group_comms;

constexpr auto kRendezvousTimeout = std::chrono::seconds(120);

// One rank's arrival with its collectives; returns when the round is done (or aborted / timed
// out, which sets the communicator's asynchronous error as NCCL does).
void rendezvous(EmuNcclComm* comm, std::unique_lock<std::mutex>& lk, std::vector<Op> ops) {
  Clique& c = *comm->clique;
  c.pending[size_t(comm->rank)] = std::move(ops);
  const uint64_t my_round = c.round;
  if (++c.arrived == c.nranks) {
    c.execute();
    for (auto& p : c.pending) p.clear();
    c.arrived = 0;
    ++c.round;
    c.cv.notify_all();
    return;
  }
  if (!c.cv.wait_for(lk, kRendezvousTimeout, [&] { return c.round != my_round || c.aborted; }))
    comm->async_error = ncclSystemError;
  else if (c.round == my_round)
    comm->async_error = ncclRemoteError;
}

// One call's (or group's) operations of one rank: its sends, then its collectives (a
// rendezvous of every rank), then its receives.
void run_ops(EmuNcclComm* comm, std::vector<Op> ops) {
  Clique& c = *comm->clique;
  std::unique_lock lk(c.mu);
  if (c.aborted) {
    comm->async_error = ncclRemoteError;
    return;
  }
  std::vector<Op> coll;
  for (const Op& op : ops) {
    if (op.kind == Kind::Send) {
      const char* p = static_cast<const char*>(op.send);
      c.channels[{comm->rank, op.peer}].emplace_back(p, p + op.count * type_bytes(op.type));
    } else if (op.kind != Kind::Recv) {
      coll.push_back(op);
    }
  }
  c.cv.notify_all();
  if (!coll.empty()) rendezvous(comm, lk, std::move(coll));
  for (const Op& op : ops) {
    if (op.kind != Kind::Recv || comm->async_error != ncclSuccess) continue;
    auto& q = c.channels[{op.peer, comm->rank}];
    if (!c.cv.wait_for(lk, kRendezvousTimeout, [&] { return !q.empty() || c.aborted; })) {
      comm->async_error = ncclSystemError;
      return;
    }
    if (q.empty()) {
      comm->async_error = ncclRemoteError;
      return;
    }
    const size_t bytes = op.count * type_bytes(op.type);
    if (q.front().size() != bytes)
      die("ncclRecv of " + std::to_string(bytes) + " bytes on rank " + std::to_string(comm->rank) +
          " meets an ncclSend of " + std::to_string(q.front().size()) + " bytes from rank " +
          std::to_string(op.peer));
    copy_bytes(op.recv, q.front().data(), bytes);
    q.pop_front();
  }
}

ncclResult_t enqueue(EmuNcclComm* comm, const Op& op, cudaStream_t stream) {
  if (!comm) return ncclInvalidArgument;
  const size_t bytes = op.count * type_bytes(op.type);
  const int n = comm->clique->nranks;
  const bool rooted = op.kind == Kind::Broadcast || op.kind == Kind::Reduce ||
                      op.kind == Kind::Send || op.kind == Kind::Recv;
  if (rooted && (op.peer < 0 || op.peer >= n)) return ncclInvalidArgument;
  const bool reads =
      op.kind != Kind::Recv && !(op.kind == Kind::Broadcast && op.peer != comm->rank);
  const bool writes = op.kind != Kind::Send && !(op.kind == Kind::Reduce && op.peer != comm->rank);
  const size_t in_bytes = op.kind == Kind::ReduceScatter ? bytes * size_t(n) : bytes;
  const size_t out_bytes = op.kind == Kind::AllGather ? bytes * size_t(n) : bytes;
  if (bytes && reads && !emu::is_device_range(op.send, in_bytes)) return ncclInvalidArgument;
  if (bytes && writes && !emu::is_device_range(op.recv, out_bytes)) return ncclInvalidArgument;
  if (tl_group_depth > 0) {
    if (comm->group_ops.empty()) {
      tl_group_comms.push_back(comm);
      comm->group_stream = stream;
    }
    comm->group_ops.push_back(op);
    return ncclSuccess;
  }
  emu::submit_op(stream, [comm, op]() { run_ops(comm, {op}); });
  return ncclSuccess;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (a peer never arrived)";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "nccl-emu-%llu",
                static_cast<unsigned long long>(registry().next_id.fetch_add(1)));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  Registry& reg = registry();
  const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
  std::shared_ptr<Clique> c;
  {
    std::lock_guard lk(reg.mu);
    c = reg.cliques[key].lock();
    if (!c) {
      c = std::make_shared<Clique>(nranks);
      reg.cliques[key] = c;
    }
  }
  if (c->nranks != nranks) return ncclInvalidArgument;
  auto* e = new EmuNcclComm;
  e->clique = std::move(c);
  e->rank = rank;
  *comm = e;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  {
    std::lock_guard lk(comm->clique->mu);
    comm->clique->aborted = true;
  }
  comm->clique->cv.notify_all();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm) return ncclInvalidArgument;
  *async_error = comm->async_error;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++tl_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (tl_group_depth == 0) return ncclInvalidUsage;
  if (--tl_group_depth > 0) return ncclSuccess;
  std::vector<EmuNcclComm*> comms;
  comms.swap(tl_group_comms);
  for (EmuNcclComm* comm : comms) {
    std::vector<Op> ops;
    ops.swap(comm->group_ops);
    emu::submit_op(comm->group_stream,
                   [comm, ops = std::move(ops)]() mutable { run_ops(comm, std::move(ops)); });
  }
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return enqueue(comm, Op{Kind::Send, buf, nullptr, count, type, ncclSum, peer}, stream);
}
ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return enqueue(comm, Op{Kind::Recv, nullptr, buf, count, type, ncclSum, peer}, stream);
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Op{Kind::Broadcast, send, recv, count, type, ncclSum, root}, stream);
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Op{Kind::Reduce, send, recv, count, type, op, root}, stream);
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Op{Kind::AllReduce, send, recv, count, type, op, 0}, stream);
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Op{Kind::AllGather, send, recv, count, type, ncclSum, 0}, stream);
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Op{Kind::ReduceScatter, send, recv, count, type, op, 0}, stream);
}

}  // namespace nanovllm::cuda_emu
