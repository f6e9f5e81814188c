#pragma once
// The control messages of a tensor-parallel group (nano-vllm's shared-memory call loop, over a
// Communicator): rank 0 owns the scheduler; before each step it sends kStep and the step's
// HostBatch, every rank runs the forward pass, rank 0 alone samples. kExit ends the other ranks'
// loops (ModelRunner::serve_worker).
#include <cstdint>

#include "distributed/communicator.h"
#include "runtime/forward_batch.h"

namespace nanovllm {

enum class TpCommand : int32_t { kExit = 0, kStep = 1 };

// Rank 0: tells every other rank what comes next.
void send_command(Communicator& comm, TpCommand command);
// Other ranks: waits, with no timeout (an idle server may not step for hours), for rank 0's next
// command. A rank 0 that fails or leaves still ends the wait with an Error (threads) or ends the
// job (mpi).
TpCommand wait_command(Communicator& comm);

// Every rank returns rank 0's HostBatch: the step description the forward pass reads. The
// sampling fields (temperatures, top_k, ..., sampling) stay rank 0's: only it samples.
void broadcast_batch(Communicator& comm, HostBatch& batch);

}  // namespace nanovllm
