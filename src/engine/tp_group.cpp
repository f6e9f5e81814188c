#include "engine/tp_group.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "distributed/mpi_communicator.h"
#include "distributed/thread_communicator.h"
#include "engine/model_runner.h"
#include "engine/tp_control.h"
#include "util/check.h"

namespace nanovllm {

namespace {

// Ranks of this job on this machine (Open MPI's environment), 1 outside mpirun.
int local_ranks(const Config& config) {
  if (config.distributed_backend != "mpi") return config.tensor_parallel_size;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int n = local ? std::atoi(local) : 1;
  return n > 0 ? n : 1;
}

// This process's rank on its machine (Open MPI's environment), 0 outside mpirun.
int local_rank() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return local ? std::max(0, std::atoi(local)) : 0;
}

int split_threads(const Config& config) {
  if (config.num_threads > 0) return config.num_threads;
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / local_ranks(config));
}

std::unique_ptr<Backend> rank_backend(const Config& config, int rank, int threads, int device,
                                      const RunnerOptions& options) {
  if (options.rank_backend) return options.rank_backend(rank);
  return make_backend({.device = config.device, .num_threads = threads, .device_index = device});
}

}  // namespace

void run_tp_worker(const Config& config, const ModelConfig& model_config, Backend& backend,
                   const RunnerOptions& options, Communicator& comm) {
  ModelRunner runner(config, model_config, backend, options, &comm);
  runner.serve_worker();
}

std::unique_ptr<TpGroup> TpGroup::start(const Config& config, const ModelConfig& model_config,
                                        const RunnerOptions& options) {
  std::unique_ptr<TpGroup> group(new TpGroup());
  Config c = config;
  if (c.distributed_backend == "mpi") {
    group->comm_ = make_mpi_communicator();
    const int world = group->comm_->world_size();
    if (c.tensor_parallel_size != 1 && c.tensor_parallel_size != world) {
      fail("--tensor-parallel-size {} under an mpirun job of {} processes: with "
           "--distributed-backend mpi every process is one rank (give -np {} or leave "
           "--tensor-parallel-size out)", c.tensor_parallel_size, world, c.tensor_parallel_size);
    }
    c.tensor_parallel_size = world;
    group->threads_per_rank_ = split_threads(c);
    group->device_index_ = local_rank();
    c.num_threads = group->threads_per_rank_;
    if (group->comm_->rank() != 0) {
      // This process is a worker rank: serve rank 0, then end the process (see the header).
      int status = 0;
      try {
        auto backend = rank_backend(c, group->comm_->rank(), c.num_threads, local_rank(), options);
        run_tp_worker(c, model_config, *backend, options, *group->comm_);
      } catch (const std::exception& e) {
        group->comm_->abort(fmt::format("tensor-parallel rank {}: {}", group->comm_->rank(), e.what()));
        status = 1;
      }
      group.reset();  // MPI_Finalize
      std::fflush(nullptr);
      std::exit(status);
    }
    return group;
  }
  const int tp = c.tensor_parallel_size;
  group->threads_per_rank_ = split_threads(c);
  c.num_threads = group->threads_per_rank_;
  group->thread_group_ = make_thread_group(tp, 300.0);
  group->comm_ = make_thread_communicator(group->thread_group_, 0);
  for (int r = 1; r < tp; ++r) {
    group->ranks_.emplace_back([c, model_config, r, tg = group->thread_group_, options] {
      std::unique_ptr<Communicator> comm = make_thread_communicator(tg, r);
      try {
        auto backend = rank_backend(c, r, c.num_threads, r, options);
        run_tp_worker(c, model_config, *backend, options, *comm);
      } catch (const std::exception& e) {
        comm->abort(fmt::format("tensor-parallel rank {}: {}", r, e.what()));
      }
    });
  }
  return group;
}

TpGroup::~TpGroup() { shutdown(); }

void TpGroup::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (comm_ && comm_->world_size() > 1) {
    try {
      send_command(*comm_, TpCommand::kExit);
    } catch (const std::exception&) {
      // The group failed already: the other ranks' loops have ended (or end now).
    }
  }
  for (std::thread& t : ranks_) t.join();
  ranks_.clear();
}

}  // namespace nanovllm
