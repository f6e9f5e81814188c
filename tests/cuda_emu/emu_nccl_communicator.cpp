// The NCCL communicator (src/distributed/nccl_communicator.cpp) compiled against the emulator's
// nccl.h (ranks are threads on emulated devices). Linked into the emulated test executables as
// an object, ahead of libnanovllm.a, whose own nccl_communicator.o (or nccl_stub.o: they define
// nothing else) is then never pulled in.
#include "../../src/distributed/nccl_communicator.cpp"
