// Compiled instead of nccl_communicator.cpp when the CUDA backend or nccl.h is missing.
#include "distributed/nccl_communicator.h"

namespace nanovllm {

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator*, int, void*) {
  fail("this nanovllm was built without NCCL: configure with the CUDA toolkit (nvcc) and NCCL "
       "(nccl.h, libnccl.so) present");
}

}  // namespace nanovllm
