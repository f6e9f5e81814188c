#pragma once
// Threads communicator: the ranks of a group are threads of one process that share a
// ThreadGroup (created once for the group); each rank's thread holds its own Communicator.
//
// Every collective publishes the rank's buffer pointers in the group, meets the others at a
// barrier, then copies straight from the peers' buffers (shared memory, no staging copies):
//   all_reduce     ring: p-1 reduce-scatter steps then p-1 all-gather steps, each rank reading
//                  one 1/p chunk from its left neighbour per step: 2N(p-1)/p bytes per rank.
//   reduce_scatter each rank reduces its own chunk from every rank, in rank order.
//   reduce         the same, each rank writing its reduced chunk into root's recv.
//   broadcast, scatter, gather, all_gather, all_to_all: each rank copies what it needs.
//   send/recv      buffered: send copies into the receiver's mailbox and returns.
// A rank that throws out of a primitive, calls abort(), or destroys its Communicator while the
// others still wait fails the group: every waiting rank throws Error naming it. A rank that
// never arrives is reported after timeout_seconds().
#include <memory>

#include "distributed/communicator.h"

namespace nanovllm {

class ThreadGroup;

// The shared state of `world_size` thread ranks. Create once, then hand communicator(r) to the
// thread of rank r (each rank exactly once). The group lives as long as any communicator.
std::shared_ptr<ThreadGroup> make_thread_group(int world_size, double timeout_seconds = 300.0);
std::unique_ptr<Communicator> make_thread_communicator(const std::shared_ptr<ThreadGroup>& group,
                                                       int rank);

}  // namespace nanovllm
