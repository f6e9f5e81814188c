#pragma once
#include <cstdint>
#include <string>

namespace nanovllm {

// Engine configuration (nano-vllm's Config). Defaults follow nano-vllm where it has them.
struct Config {
  std::string model;                    // Hugging Face model folder
  int max_num_batched_tokens = 16384;   // token budget of one step (longer prompts are chunked)
  int max_num_seqs = 512;               // sequences in one step
  int max_model_len = 4096;             // prompt + output; clamped to max_position_embeddings
                                        // (yarn: original_max_position_embeddings x factor)
  int block_size = 256;                 // tokens per KV block
  int64_t kv_cache_memory = 0;          // KV cache bytes; 0 = the device's default
                                        // (CPU: min(4 GiB, half of MemAvailable after
                                        // the buffers); CUDA: gpu_memory_utilization)
  bool kv_cache_prefault = false;       // write the whole KV cache once at startup, so that
                                        // no step pays the first write of its pages (the
                                        // kernel zeroing them; on a VM, the host backing
                                        // them): `nanovllm bench` sets it
  bool enable_prefix_caching = true;
  std::string scheduling = "mixed";     // "mixed": running decodes and prompt chunks share each
                                        // step's token budget (decodes first); "prefill_first":
                                        // a step is all prompt work or all decodes (nano-vllm)
  std::string kv_cache_dtype = "auto";  // KV cache element: "auto" (= "bf16") | "bf16" | "fp8"
                                        // (E4M3 with per-layer k/v scales: twice the tokens)
  std::string quantization = "none";    // weights quantized at load: "none" | "int8" (per output
                                        // channel) | "int4" (groups of 64 k; "int4-g32",
                                        // "int4-g128"), every linear and the embedding / lm_head
  std::string device = "cpu";           // "cpu" | "cuda"
  float gpu_memory_utilization = 0.9f;  // CUDA: share of the GPU's memory the engine may use
  bool enforce_eager = false;           // CUDA: no graphs, every decode step launched eagerly
  int num_threads = 0;                  // CPU threads of each rank; 0 = the cores / the
                                        // ranks on this machine
  int tensor_parallel_size = 1;         // ranks the model is sharded over (heads, intermediate
                                        // rows, vocab rows); > 1 runs on the CPU backend
  std::string distributed_backend = "threads";  // "threads": the ranks are threads of this
                                        // process; "mpi": one process per rank under mpirun
                                        // (tensor_parallel_size = the job's size)
  bool show_progress = true;            // progress bar on a terminal (LLM::generate)
};

}  // namespace nanovllm
