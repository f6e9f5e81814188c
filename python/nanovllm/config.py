"""Engine configuration: nano-vllm's Config fields and defaults, plus this engine's own."""
from dataclasses import dataclass, fields

from nanovllm import _C


@dataclass
class Config:
    model: str
    # nano-vllm's
    max_num_batched_tokens: int = 16384
    max_num_seqs: int = 512
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    kvcache_block_size: int = 256
    num_kvcache_blocks: int = -1
    # this engine's
    device: str = "cpu"               # "cpu" or "cuda"
    threads: int = 0                  # CPU threads of each rank; 0: the cores / the ranks
    kv_cache_memory: int = 0          # KV cache bytes; 0: the device's default
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"      # "auto" (= "bf16"), "bf16" or "fp8" (E4M3)
    quantization: str = "none"        # weights quantized at load: "none", "int8", "int4"
                                      # ("int4-g32", "int4-g64", "int4-g128")
    distributed_backend: str = "threads"  # tensor_parallel_size ranks as threads of this process,
                                          # or "mpi": one rank per process under mpirun

    def __post_init__(self):
        if self.num_kvcache_blocks != -1:
            raise ValueError(f"num_kvcache_blocks={self.num_kvcache_blocks}: not supported; "
                             "size the KV cache in bytes with kv_cache_memory=...")

    @classmethod
    def from_kwargs(cls, model, kwargs):
        """Config(model, **kwargs), naming an unknown keyword (nano-vllm ignores them silently)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(k for k in kwargs if k not in names)
        if unknown:
            raise TypeError(f"LLM: unknown engine argument(s) {', '.join(unknown)} "
                            f"(known: {', '.join(sorted(names - {'model'}))})")
        return cls(model, **kwargs)

    def to_c(self):
        c = _C.Config()
        c.model = str(self.model)
        c.max_num_batched_tokens = self.max_num_batched_tokens
        c.max_num_seqs = self.max_num_seqs
        c.max_model_len = self.max_model_len
        c.gpu_memory_utilization = self.gpu_memory_utilization
        c.enforce_eager = self.enforce_eager
        c.block_size = self.kvcache_block_size
        c.device = self.device
        c.num_threads = self.threads
        c.kv_cache_memory = self.kv_cache_memory
        c.enable_prefix_caching = self.enable_prefix_caching
        c.kv_cache_dtype = self.kv_cache_dtype
        c.quantization = self.quantization
        c.tensor_parallel_size = self.tensor_parallel_size
        c.distributed_backend = self.distributed_backend
        c.show_progress = False  # the Python progress bar (nanovllm.progress) is drawn instead
        return c
