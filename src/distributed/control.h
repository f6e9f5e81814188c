#pragma once
// Control messages: rank 0 drives the other ranks (as nano-vllm's shared-memory call loop does)
// by broadcasting a small description of each step over any communicator (threads or mpi).
#include <string>

#include "distributed/communicator.h"

namespace nanovllm {

// Every rank returns root's `message` (its length first, then its bytes).
void broadcast_message(Communicator& comm, std::string& message, int root = 0);

}  // namespace nanovllm
