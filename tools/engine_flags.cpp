#include "tools/cli_options.h"
#include "tools/commands.h"

namespace nanovllm::cli {

void add_engine_flags(CLI::App& cmd, Config& c) {
  cmd.add_option("--model", c.model, "Hugging Face model folder")->required();
  cmd.add_option("--max-num-seqs", c.max_num_seqs, "sequences in one step");
  cmd.add_option("--max-num-batched-tokens", c.max_num_batched_tokens, "token budget of one step");
  cmd.add_option("--max-model-len", c.max_model_len, "prompt + output tokens at most");
  cmd.add_option("--block-size", c.block_size, "tokens per KV cache block");
  add_size_option(cmd, "--kv-cache-memory", c.kv_cache_memory, "KV cache size (0: device default)");
  cmd.add_option("--kv-cache-dtype", c.kv_cache_dtype,
                 "KV cache element: auto (= bf16), bf16 or fp8 (E4M3: twice the tokens)")
      ->check(CLI::IsMember({"auto", "bf16", "fp8"}));
  cmd.add_option("--quantization", c.quantization,
                 "quantize the weights at load: none, int8 (per output channel) or int4 (groups "
                 "of 64; int4-g32, int4-g128), every linear and the embedding / lm_head")
      ->check(CLI::IsMember({"none", "int8", "int4", "int4-g32", "int4-g64", "int4-g128"}));
  cmd.add_flag("--no-prefix-cache{false}", c.enable_prefix_caching, "disable prefix caching");
  cmd.add_option("--scheduling", c.scheduling,
                 "mixed (decodes and prompt chunks share each step's token budget) or "
                 "prefill_first (a step is all prompt work or all decodes)")
      ->check(CLI::IsMember({"mixed", "prefill_first"}));
  cmd.add_option("--device", c.device, "cpu or cuda");
  cmd.add_option("--gpu-memory-utilization", c.gpu_memory_utilization,
                 "CUDA: share of the GPU's memory the engine may use (weights, activations, KV)");
  cmd.add_flag("--enforce-eager", c.enforce_eager, "CUDA: no graphs, every step launched eagerly");
  cmd.add_option("--threads", c.num_threads,
                 "CPU threads of each rank (0: the cores, shared by the ranks on this machine)");
  cmd.add_option("--tensor-parallel-size,--tp", c.tensor_parallel_size,
                 "ranks the model is sharded over (threads of this process, or the mpirun job's "
                 "processes with --distributed-backend mpi)");
  cmd.add_option("--distributed-backend", c.distributed_backend,
                 "threads (ranks in this process) or mpi (run under mpirun -np N: one rank per "
                 "process, rank 0 prints)")
      ->check(CLI::IsMember({"threads", "mpi"}));
}

}  // namespace nanovllm::cli
