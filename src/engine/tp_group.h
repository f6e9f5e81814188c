#pragma once
// TpGroup: the ranks of a tensor-parallel engine other than rank 0, and rank 0's communicator
// (nano-vllm starts one process per GPU and drives them over shared memory; here):
//   threads: ranks 1..N-1 are threads of this process, each with its own backend and a
//            ModelRunner on its shard that serves rank 0's steps (ModelRunner::serve_worker).
//   mpi:     this process is one rank of an mpirun job. On ranks != 0, start() does not return:
//            the process serves rank 0's steps, then exits (status 0 when rank 0 shut the group
//            down), so every front end (CLI, server, Python) runs unchanged on rank 0.
// A rank that fails (loading its shard, or in a step) fails the whole group: rank 0's next
// collective throws an Error naming it (threads), or mpirun ends the job (mpi). Never a hang.
#include <memory>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "distributed/communicator.h"
#include "engine/model_runner.h"
#include "model/hf_config.h"
#include "nanovllm/config.h"

namespace nanovllm {

class ThreadGroup;

class TpGroup {
 public:
  // Starts the group of config.tensor_parallel_size ranks (threads), or joins the mpirun job
  // (mpi; Error when this binary has no MPI or was not started by mpirun, or when
  // tensor_parallel_size is neither 1 nor the job's size).
  // Every rank's ModelRunner gets `options` (rank_backend makes the backends of ranks >= 1).
  static std::unique_ptr<TpGroup> start(const Config& config, const ModelConfig& model_config,
                                        const RunnerOptions& options = {});
  ~TpGroup();  // shutdown()
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  Communicator& comm() { return *comm_; }  // rank 0's
  int world_size() const { return comm_->world_size(); }
  // The CPU threads each rank's backend gets (config.num_threads, or the cores shared by the
  // ranks on this machine).
  int threads_per_rank() const { return threads_per_rank_; }
  // The GPU of this process's rank 0 (CUDA: ranks map to GPUs in order on each machine; under
  // mpirun, a process takes the GPU of its local rank).
  int device_index() const { return device_index_; }
  // Ends the group: tells the other ranks to exit when it still works (else fails it, which ends
  // their loops) and joins the threads. Idempotent.
  void shutdown();

 private:
  TpGroup() = default;
  std::shared_ptr<ThreadGroup> thread_group_;
  std::unique_ptr<Communicator> comm_;
  std::vector<std::thread> ranks_;
  int threads_per_rank_ = 0;
  int device_index_ = 0;
  bool shut_down_ = false;
};

// The body of a rank != 0: loads its shard and serves rank 0's steps until told to exit.
// Throws what fails (the caller fails the group with it).
void run_tp_worker(const Config& config, const ModelConfig& model_config, Backend& backend,
                   const RunnerOptions& options, Communicator& comm);

}  // namespace nanovllm
