// CpuBackend: construction, memory, weights, and the row-copy ops (embedding, its
// vocab-parallel form, gather_rows) and linear. The other ops are in norm.cpp, rope.cpp,
// activation.cpp, kv_cache.cpp, attention_prefill.cpp, attention_decode.cpp, sampler.cpp.
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/host_memory.h"
#include "backend/cpu/qgemm.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace nanovllm::cpu {

namespace {

int resolve_threads(int num_threads) {
  NV_CHECK(num_threads >= 0, "num_threads {}", num_threads);
  if (num_threads > 0) return num_threads;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : int(hw);
}

// Bytes between consecutive rows of a 2-D tensor whose last dim is contiguous.
void check_rows(const Tensor& t, DType dtype, const char* what) {
  NV_CHECK(t.ndim == 2 && t.dtype == dtype && t.stride[1] == 1 && t.stride[0] >= t.shape[1],
           "{}: expected {} [rows, cols] with contiguous rows, got {}", what, dtype_name(dtype),
           t.describe());
}

// The shapes embedding() and vocab_parallel_embedding() take: out f32 [T, H], ids i32 [T].
void check_embedding(const Tensor& out, const Tensor& ids, const LinearWeight& table) {
  check_rows(out, DType::F32, "embedding out");
  NV_CHECK(ids.ndim == 1 && ids.dtype == DType::I32 && ids.stride[0] == 1 &&
               ids.shape[0] == out.shape[0],
           "embedding ids {} for out {}", ids.describe(), out.describe());
  NV_CHECK(out.shape[1] == table.k, "embedding out {} for a [{}, {}] table", out.describe(),
           table.n, table.k);
}

}  // namespace

CpuBackend::CpuBackend(int num_threads, std::optional<CpuIsa> isa, std::optional<bool> prefill_bf16)
    : pool_(resolve_threads(num_threads)),
      gemm_isa_(select_gemm_isa(isa ? *isa : cpu_isa_from_env())),
      qgemm_isa_(select_qgemm_isa(isa ? *isa : cpu_isa_from_env())),
      decode_avx512_(avx512_allowed(isa ? *isa : cpu_isa_from_env()) && cpu_has_avx512()),
      prefill_bf16_(prefill_bf16 ? *prefill_bf16 : prefill_bf16_from_env()) {
  if (prefill_bf16_ && !bf16_prefill_available(isa ? *isa : cpu_isa_from_env()))
    fail("the bf16 prefill attention (NANOVLLM_PREFILL_ATTENTION=bf16) needs AVX-512 BF16, which "
         "this CPU lacks or NANOVLLM_CPU_ISA=avx2 turned off");
}

// e.g. "cpu (gemm avx512_bf16, decode attention avx512, quantized gemm avx512_vnni, 2 threads)".
std::string CpuBackend::describe() const {
  return fmt::format("cpu (gemm {}, decode attention {}, quantized gemm {}{}, {} thread{})",
                     gemm_isa_name(gemm_isa_), decode_avx512_ ? "avx512" : "avx2",
                     qgemm_isa_name(qgemm_isa_),
                     prefill_bf16_ ? ", prefill attention bf16" : "", pool_.size(),
                     pool_.size() == 1 ? "" : "s");
}

DeviceMemory CpuBackend::memory_info() const {
  DeviceMemory m;
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") m.free_bytes = kib * 1024;
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
  }
  if (m.total_bytes <= 0) {  // no /proc: sysconf's view
    m.total_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
    m.free_bytes = int64_t(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  }
  return m;
}

void CpuBackend::parallel_rows(int64_t n, int64_t cost_per_item,
                               const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kMinParallelWork = 32768;  // ~element operations worth a pool dispatch
  if (n <= 0) return;
  if (pool_.size() == 1 || n == 1 || n * cost_per_item < kMinParallelWork) {
    fn(0, n);
    return;
  }
  pool_.parallel_for(n, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
}

// ---- memory ----

Buffer CpuBackend::alloc(size_t bytes) {
  return Buffer(host_alloc(bytes), bytes, DeviceKind::CPU,
                [bytes](void* q) { host_free(q, bytes); });
}

void CpuBackend::upload(Tensor dst, const void* host) {
  NV_CHECK(dst.is_contiguous(), "upload into non-contiguous {}", dst.describe());
  if (dst.nbytes()) std::memcpy(dst.data, host, dst.nbytes());
}

void CpuBackend::download(void* host, Tensor src) {
  NV_CHECK(src.is_contiguous(), "download from non-contiguous {}", src.describe());
  if (src.nbytes()) std::memcpy(host, src.data, src.nbytes());
}

// dst[...] = src[...] for tensors of the same shape and dtype whose last dim is contiguous.
void CpuBackend::copy(Tensor dst, Tensor src) {
  NV_CHECK(dst.dtype == src.dtype && dst.ndim == src.ndim && dst.ndim >= 1, "copy {} <- {}",
           dst.describe(), src.describe());
  for (int d = 0; d < dst.ndim; ++d)
    NV_CHECK(dst.shape[d] == src.shape[d], "copy {} <- {}", dst.describe(), src.describe());
  const int last = dst.ndim - 1;
  NV_CHECK(dst.stride[last] == 1 && src.stride[last] == 1, "copy needs a contiguous last dim");
  if (dst.numel() == 0) return;
  const size_t es = dtype_size(dst.dtype);
  const size_t row_bytes = size_t(dst.shape[last]) * es;
  int64_t outer = 1;
  for (int d = 0; d < last; ++d) outer *= dst.shape[d];
  parallel_rows(outer, dst.shape[last], [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t rem = r, doff = 0, soff = 0;
      for (int d = last - 1; d >= 0; --d) {
        const int64_t i = rem % dst.shape[d];
        rem /= dst.shape[d];
        doff += i * dst.stride[d];
        soff += i * src.stride[d];
      }
      std::memmove(static_cast<char*>(dst.data) + doff * int64_t(es),
                   static_cast<const char*>(src.data) + soff * int64_t(es), row_bytes);
    }
  });
}

void CpuBackend::fill_zero(Tensor dst) {
  NV_CHECK(dst.is_contiguous(), "fill_zero of non-contiguous {}", dst.describe());
  // Large buffers (a whole KV cache) in 2 MiB pieces over the threads: a first write of fresh
  // pages is the kernel's (and on a VM the host's) zeroing, about 0.5-1 GB/s a thread there.
  constexpr int64_t kPiece = int64_t(2) << 20;
  const int64_t bytes = int64_t(dst.nbytes()), pieces = (bytes + kPiece - 1) / kPiece;
  char* p = static_cast<char*>(dst.data);
  parallel_rows(pieces, kPiece / 16, [&](int64_t b, int64_t e) {
    std::memset(p + b * kPiece, 0, size_t(std::min(bytes, e * kPiece) - b * kPiece));
  });
}

// ---- weights ----

LinearWeight CpuBackend::make_linear_weight(Tensor w_host) {
  NV_CHECK(w_host.ndim == 2 && w_host.dtype == DType::BF16 && w_host.is_contiguous(),
           "linear weight must be contiguous bf16 [N, K], got {}", w_host.describe());
  LinearWeight w;
  w.n = w_host.shape[0];
  w.k = w_host.shape[1];
  const size_t bytes = packed_weight_bytes(w.n, w.k);
  w.storage = alloc(bytes);
  // On the pool: packing is most of a model's load time, and each thread's blocks land in pages it
  // touches first.
  const int64_t blocks = packed_weight_blocks(w.n);
  parallel_rows(blocks, int64_t(bytes) / blocks, [&](int64_t b0, int64_t b1) {
    pack_weight_blocks(w.storage.data(), w_host.ptr<const uint16_t>(), w.n, w.k, b0, b1);
  });
  w.data = Tensor::contiguous(w.storage.data(), DType::BF16, {int64_t(bytes / 2)});
  return w;
}

LinearWeight CpuBackend::make_quantized_linear_weight(const QuantizedWeight& q) {
  LinearWeight w;
  w.n = q.n;
  w.k = q.k;
  w.quant = q.scheme;
  const QuantLayout layout = quant_layout(q.scheme, q.n, q.k);
  w.storage = alloc(layout.bytes());
  parallel_rows(layout.nblocks, int64_t(layout.block_bytes), [&](int64_t b0, int64_t b1) {
    pack_quantized_blocks(w.storage.data(), q, layout, b0, b1);
  });
  w.data = Tensor::contiguous(w.storage.data(), DType::I32, {int64_t(layout.bytes() / 4)});
  return w;
}

// ---- ops ----

namespace {

// Row `row` of a [n, k] weight made by make_linear_weight or make_quantized_linear_weight, as f32.
void weight_row(float* out, const LinearWeight& w, int64_t row) {
  if (w.quant.enabled()) {
    unpack_quantized_row(out, w.data.data, quant_layout(w.quant, w.n, w.k), row);
  } else {
    unpack_weight_row(out, w.data.data, w.n, w.k, row);
  }
}

}  // namespace

// out = table[ids]  (F.embedding(ids, table))
void CpuBackend::embedding(Tensor out, Tensor ids, const LinearWeight& table) {
  check_embedding(out, ids, table);
  const int32_t* id = ids.ptr<const int32_t>();
  parallel_rows(out.shape[0], table.k, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      NV_CHECK(id[t] >= 0 && id[t] < table.n, "token id {} outside the vocabulary [0, {})", id[t],
               table.n);
      weight_row(out.ptr<float>() + t * out.stride[0], table, id[t]);
    }
  });
}

// out = mask * table[ids - vocab_start], mask = vocab_start <= ids < vocab_start + n
// (VocabParallelEmbedding's F.embedding of one rank's slice).
void CpuBackend::vocab_parallel_embedding(Tensor out, Tensor ids, const LinearWeight& table,
                                          int64_t vocab_start) {
  check_embedding(out, ids, table);
  NV_CHECK(vocab_start >= 0, "vocab_start {}", vocab_start);
  const int32_t* id = ids.ptr<const int32_t>();
  parallel_rows(out.shape[0], table.k, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      NV_CHECK(id[t] >= 0, "negative token id {}", id[t]);
      float* row = out.ptr<float>() + t * out.stride[0];
      const int64_t local = int64_t(id[t]) - vocab_start;
      if (local >= 0 && local < table.n) {
        weight_row(row, table, local);
      } else {
        std::memset(row, 0, size_t(table.k) * sizeof(float));  // another rank's row
      }
    }
  });
}

// out = x @ w.T (+ bias)  (F.linear(x, w, bias))
void CpuBackend::linear(Tensor out, Tensor x, const LinearWeight& w, const Tensor* bias) {
  linear_on(pool_, gemm_scratch_, out, x, w, bias);
}

void CpuBackend::linear_on(ThreadPool& pool, GemmScratch& scratch, Tensor out, Tensor x,
                           const LinearWeight& w, const Tensor* bias) {
  check_rows(out, DType::F32, "linear out");
  check_rows(x, DType::F32, "linear x");
  NV_CHECK(x.shape[0] == out.shape[0] && x.shape[1] == w.k && out.shape[1] == w.n,
           "linear out {} = x {} @ w[{}, {}]^T", out.describe(), x.describe(), w.n, w.k);
  const uint16_t* bias_ptr = nullptr;
  if (bias) {
    NV_CHECK(bias->ndim == 1 && bias->dtype == DType::BF16 && bias->shape[0] == w.n &&
                 bias->stride[0] == 1,
             "linear bias {} for N = {}", bias->describe(), w.n);
    bias_ptr = bias->ptr<const uint16_t>();
  }
  if (w.quant.enabled()) {
    const QuantLayout layout = quant_layout(w.quant, w.n, w.k);
    qgemm({out.ptr<float>(), out.stride[0], x.ptr<const float>(), x.stride[0], w.data.data,
           &layout, bias_ptr, x.shape[0], &scratch},
          pool, qgemm_isa_);
    return;
  }
  GemmArgs args{out.ptr<float>(), out.stride[0], x.ptr<const float>(),
                x.stride[0],      w.data.data,   bias_ptr,
                x.shape[0],       w.n,           w.k};
  args.scratch = &scratch;
  gemm(args, pool, gemm_isa_);
}

// out = x[indices]  (x.index_select(0, indices))
void CpuBackend::gather_rows(Tensor out, Tensor x, Tensor indices) {
  NV_CHECK(out.ndim == 2 && x.ndim == 2 && out.dtype == x.dtype && out.shape[1] == x.shape[1] &&
               out.stride[1] == 1 && x.stride[1] == 1,
           "gather_rows out {} from x {}", out.describe(), x.describe());
  NV_CHECK(indices.ndim == 1 && indices.dtype == DType::I32 && indices.stride[0] == 1 &&
               indices.shape[0] == out.shape[0],
           "gather_rows indices {} for out {}", indices.describe(), out.describe());
  const int32_t* idx = indices.ptr<const int32_t>();
  const int64_t es = int64_t(dtype_size(x.dtype));
  for (int64_t b = 0; b < out.shape[0]; ++b) {
    NV_CHECK(idx[b] >= 0 && idx[b] < x.shape[0], "gather_rows index {} of {} rows", idx[b],
             x.shape[0]);
    std::memcpy(static_cast<char*>(out.data) + b * out.stride[0] * es,
                static_cast<const char*>(x.data) + idx[b] * x.stride[0] * es,
                size_t(x.shape[1] * es));
  }
}

}  // namespace nanovllm::cpu
