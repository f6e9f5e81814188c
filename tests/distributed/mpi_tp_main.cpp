// One rank of tensor-parallel Qwen3/Qwen2 under mpirun (run by mpi_tp_test):
// `mpirun -np N mpi_tp_main <model folder> [decode steps]`. Rank 0 builds each step, broadcasts
// it over MPI, every rank runs its shard, rank 0 gathers the logits, picks the greedy tokens,
// and compares with a single-rank TpWorker it runs itself (a threads group of one).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "distributed/mpi_communicator.h"
#include "distributed/thread_communicator.h"
#include "distributed/tp_batches.h"
#include "engine/tp_worker.h"

using namespace nanovllm;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mpi_tp_main <model folder> [decode steps]\n");
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 6;
  try {
    auto comm = make_mpi_communicator(60.0);
    auto backend = make_backend({.device = "cpu", .num_threads = 1, .device_index = 0});
    TpWorkerOptions o;
    o.model = argv[1];
    o.max_position = 128;
    o.max_tokens = 64;
    o.max_seqs = 4;
    o.block_size = test::kBlock;
    o.kv_cache_bytes = 8 << 20;
    TpWorker worker(o, *comm, *backend);
    const bool root = comm->rank() == 0;
    // Rank 0's reference: the same model on one rank.
    std::shared_ptr<ThreadGroup> solo = root ? make_thread_group(1) : nullptr;
    std::unique_ptr<Communicator> solo_comm = root ? make_thread_communicator(solo, 0) : nullptr;
    auto solo_backend = make_backend({.device = "cpu", .num_threads = 1, .device_index = 0});
    std::unique_ptr<TpWorker> reference = root ? std::make_unique<TpWorker>(o, *solo_comm, *solo_backend) : nullptr;
    const int V = worker.full_config().vocab_size;
    std::vector<test::Seq> seqs, ref_seqs;
    if (root) seqs = ref_seqs = test::tp_prompts(V);
    int32_t mismatches = 0;
    double worst = 0;
    for (int step = 0; step <= steps; ++step) {
      HostBatch h = root ? (step == 0 ? test::prefill_batch(seqs) : test::decode_batch(seqs)) : HostBatch{};
      broadcast_batch(*comm, h);
      std::vector<float> logits = worker.forward(h);
      if (!root) continue;
      HostBatch hr = step == 0 ? test::prefill_batch(ref_seqs) : test::decode_batch(ref_seqs);
      std::vector<float> ref = reference->forward(hr);
      // The reference tolerance (see tp_model_test): max |difference| / max |logit| < 1e-2.
      double diff = 0, scale = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        diff = std::max(diff, std::fabs(double(logits[i]) - ref[i]));
        scale = std::max(scale, std::fabs(double(ref[i])));
      }
      worst = std::max(worst, diff / scale);
      if (diff / scale >= 1e-2) ++mismatches;
      for (size_t b = 0; b < seqs.size(); ++b) {
        const float* row = logits.data() + b * size_t(V);
        const float* rrow = ref.data() + b * size_t(V);
        seqs[b].tokens.push_back(int32_t(std::max_element(row, row + V) - row));
        ref_seqs[b].tokens.push_back(int32_t(std::max_element(rrow, rrow + V) - rrow));
        if (seqs[b].tokens.back() != ref_seqs[b].tokens.back()) ++mismatches;
      }
    }
    comm->broadcast(Tensor::contiguous(&mismatches, DType::I32, {1}), 0);
    if (root) {
      std::printf("mpi tp=%d: %s over %d steps (max |logit difference| / max |logit| %.2e, %d mismatches)\n",
                  comm->world_size(), mismatches == 0 ? "tokens and logits match tp=1" : "MISMATCH",
                  steps + 1, worst, mismatches);
    }
    return mismatches == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
