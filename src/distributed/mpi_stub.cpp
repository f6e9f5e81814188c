// Compiled instead of mpi_communicator.cpp when CMake found no MPI.
#include <cstdlib>

#include "distributed/mpi_communicator.h"

namespace nanovllm {

bool mpi_built() { return false; }

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

std::unique_ptr<Communicator> make_mpi_communicator(double) {
  fail("this nanovllm was built without MPI: run scripts/install_deps.sh (libopenmpi-dev "
       "openmpi-bin) and configure again");
}

}  // namespace nanovllm
