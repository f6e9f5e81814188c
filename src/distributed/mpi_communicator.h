#pragma once
// MPI communicator: one process per rank, launched by Open MPI's mpirun on one or many machines
// (`mpirun -np N nanovllm ... --distributed-backend mpi`). Collectives are Open MPI's own
// (MPI_Allreduce, MPI_Allgatherv, ...; its coll/tuned component picks the algorithm by size);
// bf16 is reduced by a user MPI_Op that sums in fp32. It also carries the engine's control
// messages (control.h) and bootstraps NCCL (its unique id is broadcast over it).
//
// Failure: a rank that throws out of a primitive or calls abort() prints the reason on stderr
// and calls MPI_Abort, so mpirun ends every process; a rank that dies makes mpirun end the
// others; a primitive that waits longer than timeout_seconds() (a peer stuck outside MPI)
// prints which primitive stalled and exits the process with status 3, which ends the job.
//
// Built when CMake finds MPI (scripts/install_deps.sh installs libopenmpi-dev openmpi-bin);
// otherwise make_mpi_communicator throws an Error saying so.
#include <memory>

#include "distributed/communicator.h"

namespace nanovllm {

// True when this binary was built with MPI.
bool mpi_built();
// True when this process was started by mpirun (Open MPI's environment is present).
bool launched_by_mpirun();
// Initialises MPI and returns this process's rank of MPI_COMM_WORLD. A process makes one (MPI
// cannot start twice): MPI is finalised when it is destroyed.
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds = 300.0);

}  // namespace nanovllm
