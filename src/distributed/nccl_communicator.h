#pragma once
// NCCL communicator: GPU collectives on CUDA tensors, ordered on one CUDA stream per rank (the
// communicator's stream(); synchronize() waits for it and reports NCCL's asynchronous errors).
// One rank per GPU; ranks are threads (a thread communicator bootstraps) or processes under
// mpirun (the MPI communicator bootstraps): rank 0 creates NCCL's unique id and broadcasts it
// over `bootstrap`. With bootstrap == nullptr the world is this one GPU (world size 1).
//
// Uneven sizes: all_gather / reduce_scatter with unequal counts run as grouped broadcasts /
// reduces (one per rank's chunk); scatter, gather and all_to_all as grouped send/recv.
// barrier is an all-reduce of one int followed by a stream synchronize.
//
// Built with the CUDA backend (NANOVLLM_WITH_CUDA and nccl.h found); otherwise
// make_nccl_communicator throws an Error saying so.
#include <memory>

#include "distributed/communicator.h"

namespace nanovllm {

bool nccl_built();
// `bootstrap` (may be null for world size 1) must outlive the returned communicator: abort()
// goes through it so that every rank stops.
// `stream` (a cudaStream_t, not owned): order the collectives on it, e.g. a backend's stream so
// that they follow its ops; nullptr: a stream of the communicator's own.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator* bootstrap, int cuda_device,
                                                     void* stream = nullptr);

}  // namespace nanovllm
