// One rank of the MPI collectives check, run by CTest as
// `mpirun --oversubscribe --allow-run-as-root -np N mpi_collectives_main` (N = 2, 3, 4):
// every primitive against a plain computation (collective_checks.h). Exit 0 on every rank
// only when no rank saw a failure.
#include <cstdio>

#include "distributed/collective_checks.h"
#include "distributed/mpi_communicator.h"

int main() {
  try {
    auto comm = nanovllm::make_mpi_communicator(60.0);
    auto failures = nanovllm::test::CollectiveChecks(*comm).run_all();
    for (const auto& f : failures) std::fprintf(stderr, "FAIL %s\n", f.c_str());
    int32_t bad = int32_t(failures.size());
    comm->all_reduce(nanovllm::Tensor::contiguous(&bad, nanovllm::DType::I32, {1}));
    if (comm->rank() == 0) {
      std::printf("mpi collectives, world size %d: %s (%d failures over all ranks)\n",
                  comm->world_size(), bad == 0 ? "all match" : "MISMATCH", bad);
    }
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
