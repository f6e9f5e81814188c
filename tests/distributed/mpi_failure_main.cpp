// One rank of an MPI failure scenario, run by mpi_failures_test under mpirun:
//   ok     every rank runs 20 all-reduces and exits 0
//   throw  rank 1 passes a recv of the wrong size to scatter (an Error inside a primitive)
//   abort  rank 1 cannot load its shard and calls abort()
//   die    rank 1 is killed (SIGKILL) between all-reduces
//   stall  rank 1 sleeps outside MPI; the others' watchdog (2 s) ends the job
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "distributed/mpi_communicator.h"

using namespace nanovllm;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "ok";
  try {
    auto comm = make_mpi_communicator(2.0);
    float x[64] = {};
    auto t = Tensor::contiguous(x, DType::F32, {64});
    for (int step = 0; step < 20; ++step) {
      if (step == 5 && comm->rank() == 1) {
        if (mode == "throw") {
          float y[2];
          comm->scatter(t, Tensor::contiguous(y, DType::F32, {2}), 0, {64, 64, 64});
        } else if (mode == "abort") {
          comm->abort("cannot load weights: missing shard model-00002-of-00002.safetensors");
        } else if (mode == "die") {
          std::raise(SIGKILL);
        } else if (mode == "stall") {
          std::this_thread::sleep_for(std::chrono::seconds(120));
        }
      }
      comm->all_reduce(t);
    }
    if (comm->rank() == 0) std::printf("all %d ranks finished\n", comm->world_size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
