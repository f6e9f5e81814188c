// CudaBackend: device, stream, memory, weights, graphs, and each op's shape checks before its
// launcher (kernels.h). See cuda_backend.h.
#include "backend/cuda/cuda_backend.h"

#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/quant_linear.h"

namespace nanovllm::cuda {

void cuda_failed(const char* op, const char* call, cudaError_t err) {
  fail("cuda {}: {} failed: {} ({})", op, call, cudaGetErrorString(err), cudaGetErrorName(err));
}

void cublas_failed(const char* op, const char* call, int status) {
  fail("cuda {}: {} failed: cuBLAS status {}", op, call, status);
}

namespace {

bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

void check_act(const Tensor& t, const char* what) {
  NV_CHECK(t.device == DeviceKind::CUDA && t.dtype == DType::BF16 && t.ndim >= 2 && t.ndim <= 3 &&
               t.stride[t.ndim - 1] == 1,
           "cuda {}: expected a bf16 CUDA tensor [rows, d] or [T, heads, d] with contiguous last "
           "dim, got {}",
           what, t.describe());
}

void check_i32(const Tensor& t, int64_t n, const char* what) {
  NV_CHECK(t.ndim == 1 && t.dtype == DType::I32 && t.stride[0] == 1 && t.shape[0] == n,
           "cuda {}: expected i32 [{}], got {}", what, n, t.describe());
}

// A 2-D or 3-D tensor as rows of its last dim.
Rows rows_of(const Tensor& t) {
  Rows r;
  r.data = t.data;
  if (t.ndim == 2) {
    r.rows = t.shape[0];
    r.stride0 = t.stride[0];
  } else {
    r.rows = t.shape[0] * t.shape[1];
    r.inner = t.shape[1];
    r.stride0 = t.stride[0];
    r.stride1 = t.stride[1];
  }
  return r;
}

void check_cache(const LayerKVCache& c) {
  NV_CHECK(c.k.ndim == 4 && (c.k.dtype == DType::BF16 || c.k.dtype == DType::F8E4M3) &&
               c.v.dtype == c.k.dtype && c.k.is_contiguous() && c.v.is_contiguous() &&
               same_shape(c.k, c.v) && c.k.device == DeviceKind::CUDA,
           "cuda KV cache k {} v {}: expected bf16 or fp8 [num_blocks, block_size, Hkv, D]",
           c.k.describe(), c.v.describe());
  NV_CHECK(c.k.dtype == DType::BF16 || (std::isfinite(c.k_scale) && c.k_scale > 0.0f &&
                                        std::isfinite(c.v_scale) && c.v_scale > 0.0f),
           "cuda fp8 KV cache scales k {} v {}: expected finite and positive", c.k_scale,
           c.v_scale);
}

bool is_fp8(const LayerKVCache& c) { return c.k.dtype == DType::F8E4M3; }

// A weight made by make_quantized_linear_weight, as its kernels read it (quant_linear.h).
QuantWeightView quant_view(const LinearWeight& w) {
  const QuantDeviceLayout l =
      quant_device_layout(w.quant.format == QuantFormat::Int4, w.quant.group, w.n, w.k);
  NV_CHECK(w.data.device == DeviceKind::CUDA && w.data.nbytes() >= l.bytes,
           "cuda: quantized weight [{}, {}] {} held in {}", w.n, w.k, quantization_name(w.quant),
           w.data.describe());
  QuantWeightView v;
  v.codes = static_cast<const uint8_t*>(w.data.data);
  v.scales = reinterpret_cast<const uint32_t*>(v.codes + l.scales_offset);
  v.n = w.n;
  v.k = w.k;
  v.row_bytes = l.row_bytes;
  v.groups = int32_t(l.groups);
  v.group = int32_t(l.group);
  v.int4 = l.int4;
  return v;
}

KVStore kv_store(const LayerKVCache& c) {
  KVStore s;
  s.k = c.k.data;
  s.v = c.v.data;
  s.num_slots = c.k.shape[0] * c.k.shape[1];
  s.fp8 = is_fp8(c);
  s.k_scale = s.fp8 ? c.k_scale : 1.0f;
  s.v_scale = s.fp8 ? c.v_scale : 1.0f;
  return s;
}

PagedKV paged(const LayerKVCache& c, const ForwardBatch& batch) {
  PagedKV kv;
  kv.k = c.k.data;
  kv.v = c.v.data;
  kv.fp8 = is_fp8(c);
  kv.k_scale = kv.fp8 ? c.k_scale : 1.0f;
  kv.v_scale = kv.fp8 ? c.v_scale : 1.0f;
  kv.block_size = int32_t(c.k.shape[1]);
  kv.hkv = int32_t(c.k.shape[2]);
  kv.d = int32_t(c.k.shape[3]);
  kv.block_tables = batch.block_tables.ptr<const int32_t>();
  kv.table_stride = batch.block_tables.ndim == 2 ? batch.block_tables.stride[0] : 0;
  // A window past int32 covers every context the kernels index (int32 positions): none.
  kv.sliding_window =
      c.sliding_window > 0 && c.sliding_window <= INT32_MAX ? int32_t(c.sliding_window) : 0;
  return kv;
}

void check_attention(const Tensor& out, const Tensor& q, const LayerKVCache& cache,
                     const ForwardBatch& batch, int64_t rows, const char* what) {
  check_cache(cache);
  check_act(q, what);
  const int64_t hkv = cache.k.shape[2], d = cache.k.shape[3];
  NV_CHECK(q.ndim == 3 && q.shape[0] == rows && q.shape[2] == d && q.shape[1] % hkv == 0 &&
               q.stride[1] % 8 == 0 && q.stride[0] % 8 == 0 &&
               reinterpret_cast<uintptr_t>(q.data) % 16 == 0,  // 16-byte loads of q rows
           "cuda {}: q {} for a cache of {} ({} rows)", what, q.describe(), cache.k.describe(),
           rows);
  NV_CHECK(out.ndim == 3 && out.dtype == DType::BF16 && out.is_contiguous() && same_shape(out, q),
           "cuda {}: out {} for q {}", what, out.describe(), q.describe());
  NV_CHECK(attention_head_dim_supported(d),
           "cuda {}: head_dim {} (supported: 16, 32, 64, 128, 256)", what, d);
  NV_CHECK(decode_group_tile(int(q.shape[1] / hkv)) > 0,
           "cuda {}: {} query heads per kv head (at most {})", what, q.shape[1] / hkv,
           kMaxGqaGroup);
  NV_CHECK(batch.block_tables.ndim == 2 && batch.block_tables.dtype == DType::I32 &&
               batch.block_tables.shape[0] >= batch.num_seqs && batch.block_tables.stride[1] == 1,
           "cuda {}: block_tables {}", what, batch.block_tables.describe());
}

class CudaGraph : public DeviceGraph {
 public:
  CudaGraph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int device)
      : graph_(graph), exec_(exec), stream_(stream), device_(device) {}
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  void replay() override {
    NV_CUDA_CHECK("cudaSetDevice", cudaSetDevice(device_));  // per thread, as CudaBackend's ops
    NV_CUDA_CHECK("graph replay", cudaGraphLaunch(exec_, stream_));
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  int device_;
};

}  // namespace

CudaBackend::CudaBackend(int device_index) : device_(device_index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    fail("no CUDA device: {} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
  if (count == 0) fail("no CUDA device: the driver reports 0 GPUs");
  if (device_index < 0 || device_index >= count)
    fail("no CUDA device: device index {} but {} GPU{} present", device_index, count,
         count == 1 ? "" : "s");
  NV_CUDA_CHECK("init", cudaSetDevice(device_));
  cudaDeviceProp prop{};
  NV_CUDA_CHECK("init", cudaGetDeviceProperties(&prop, device_));
  if (prop.major < 8)
    fail("no CUDA device: {} is sm_{}{}; the CUDA backend needs sm_80 or newer (bf16 tensor cores)",
         prop.name, prop.major, prop.minor);
  num_sms_ = prop.multiProcessorCount;
  description_ =
      fmt::format("cuda ({}, sm_{}{}, {} SMs, {:.0f} GiB)", prop.name, prop.major, prop.minor,
                  prop.multiProcessorCount, double(prop.totalGlobalMem) / double(1 << 30));
  NV_CUDA_CHECK("init", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<LtGemm>();
  host_sampler_ = std::make_unique<cpu::CpuBackend>(1);
}

CudaBackend::~CudaBackend() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

// The CUDA runtime's current device is per thread, and the engine may call from a thread other
// than the one that built the backend (LLM::generate steps on the async engine's thread).
void CudaBackend::use_device() const { NV_CUDA_CHECK("cudaSetDevice", cudaSetDevice(device_)); }

bool CudaBackend::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  NV_CUDA_CHECK("capture status", cudaStreamIsCapturing(stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

// ---- memory ----

Buffer CudaBackend::alloc(size_t bytes) {
  use_device();
  NV_CHECK(!capturing(), "cuda alloc of {} bytes during graph capture", bytes);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free out-of-memory error
    fail("cuda alloc: out of GPU memory allocating {} bytes: {}", bytes, cudaGetErrorString(err));
  }
  return Buffer(p, bytes, DeviceKind::CUDA, [](void* q) { cudaFree(q); });
}

void CudaBackend::upload(Tensor dst, const void* host) {
  use_device();
  NV_CHECK(dst.is_contiguous(), "cuda upload into non-contiguous {}", dst.describe());
  if (dst.nbytes() == 0) return;
  // Pageable source: the copy has left `host` when the call returns; stream order kept.
  NV_CUDA_CHECK("upload",
                cudaMemcpyAsync(dst.data, host, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download(void* host, Tensor src) {
  use_device();
  NV_CHECK(src.is_contiguous(), "cuda download from non-contiguous {}", src.describe());
  if (src.nbytes() == 0) return;
  NV_CUDA_CHECK("download",
                cudaMemcpyAsync(host, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  NV_CUDA_CHECK("download", cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(Tensor dst, Tensor src) {
  use_device();
  NV_CHECK(dst.dtype == src.dtype && dst.ndim == src.ndim && dst.ndim >= 1, "cuda copy {} <- {}",
           dst.describe(), src.describe());
  for (int d = 0; d < dst.ndim; ++d)
    NV_CHECK(dst.shape[d] == src.shape[d], "cuda copy {} <- {}", dst.describe(), src.describe());
  const int last = dst.ndim - 1;
  NV_CHECK(dst.stride[last] == 1 && src.stride[last] == 1, "cuda copy needs a contiguous last dim");
  if (dst.numel() == 0) return;
  const size_t es = dtype_size(dst.dtype);
  if (dst.is_contiguous() && src.is_contiguous()) {
    NV_CUDA_CHECK("copy", cudaMemcpyAsync(dst.data, src.data, dst.nbytes(),
                                          cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  // Rows of the last dim: 2-D directly, 3-D per index of dim 0.
  NV_CHECK(dst.ndim <= 3, "cuda copy of non-contiguous {}-D tensors ({} <- {})", dst.ndim,
           dst.describe(), src.describe());
  const int64_t outer0 = dst.ndim == 3 ? dst.shape[0] : 1;
  for (int64_t i = 0; i < outer0; ++i) {
    const int64_t rows = dst.ndim == 1 ? 1 : dst.shape[last - 1];
    const int64_t dpitch = dst.ndim == 1 ? 0 : dst.stride[last - 1];
    const int64_t spitch = src.ndim == 1 ? 0 : src.stride[last - 1];
    char* d0 = static_cast<char*>(dst.data) + (dst.ndim == 3 ? i * dst.stride[0] : 0) * int64_t(es);
    const char* s0 =
        static_cast<const char*>(src.data) + (src.ndim == 3 ? i * src.stride[0] : 0) * int64_t(es);
    const size_t width = size_t(dst.shape[last]) * es;
    NV_CUDA_CHECK("copy", cudaMemcpy2DAsync(d0, rows == 1 ? width : size_t(dpitch) * es, s0,
                                            rows == 1 ? width : size_t(spitch) * es, width,
                                            size_t(rows), cudaMemcpyDeviceToDevice, stream_));
  }
}

void CudaBackend::fill_zero(Tensor dst) {
  use_device();
  NV_CHECK(dst.is_contiguous(), "cuda fill_zero of non-contiguous {}", dst.describe());
  if (dst.nbytes()) NV_CUDA_CHECK("fill_zero", cudaMemsetAsync(dst.data, 0, dst.nbytes(), stream_));
}

void CudaBackend::synchronize() {
  use_device();
  NV_CUDA_CHECK("synchronize", cudaStreamSynchronize(stream_));
}

void CudaBackend::profile_window(bool open) {
  synchronize();
  NV_CUDA_CHECK("profile_window", open ? cudaProfilerStart() : cudaProfilerStop());
}

DeviceMemory CudaBackend::memory_info() const {
  use_device();
  size_t free_bytes = 0, total_bytes = 0;
  NV_CUDA_CHECK("memory_info", cudaSetDevice(device_));
  NV_CUDA_CHECK("memory_info", cudaMemGetInfo(&free_bytes, &total_bytes));
  return {int64_t(free_bytes), int64_t(total_bytes)};
}

std::unique_ptr<DeviceGraph> CudaBackend::capture_graph(const std::function<void()>& record) {
  use_device();
  NV_CHECK(!capturing(), "cuda capture_graph inside a capture");
  NV_CUDA_CHECK("capture_graph", cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    record();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream_, &broken);
    if (broken) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  NV_CUDA_CHECK("capture_graph", cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) {
    cudaGraphDestroy(graph);
    cuda_failed("capture_graph", "cudaGraphInstantiate", err);
  }
  return std::make_unique<CudaGraph>(graph, exec, stream_, device_);
}

void* CudaBackend::grow_workspace(Buffer& ws, size_t bytes, const char* op) {
  if (ws.bytes() < bytes) {
    NV_CHECK(!capturing(),
             "cuda {} needs {} bytes of workspace during graph capture (have {}): warm up with "
             "the largest step before capturing",
             op, bytes, ws.bytes());
    // The old buffer stays alive: graphs captured before this growth still write into it.
    if (ws.data()) retired_ws_.push_back(std::move(ws));
    ws = alloc(bytes);
  }
  return ws.data();
}

float* CudaBackend::decode_workspace(size_t floats) {
  return static_cast<float*>(
      grow_workspace(decode_ws_, floats * sizeof(float), "attention_decode"));
}

int32_t* CudaBackend::decode_counters(size_t n) {
  const void* before = decode_counters_.data();
  void* p = grow_workspace(decode_counters_, n * sizeof(int32_t), "attention_decode (counters)");
  if (p != before) {  // a new buffer (outside capture): zero once, each launch leaves it zero
    NV_CUDA_CHECK("attention_decode counters",
                  cudaMemsetAsync(p, 0, decode_counters_.bytes(), stream_));
  }
  return static_cast<int32_t*>(p);
}

// ---- weights ----

LinearWeight CudaBackend::make_linear_weight(Tensor w_host) {
  use_device();
  NV_CHECK(w_host.ndim == 2 && w_host.dtype == DType::BF16 && w_host.is_contiguous(),
           "linear weight must be contiguous bf16 [N, K], got {}", w_host.describe());
  LinearWeight w;
  w.n = w_host.shape[0];
  w.k = w_host.shape[1];
  w.storage = alloc(w_host.nbytes());
  w.data = w.storage.as(DType::BF16, {w.n, w.k});
  upload(w.data, w_host.data);
  synchronize();  // the host copy may go away after we return
  return w;
}

LinearWeight CudaBackend::make_quantized_linear_weight(const QuantizedWeight& q) {
  use_device();
  const QuantScheme sc = q.scheme;
  const bool int4 = sc.format == QuantFormat::Int4;
  if (!((sc.format == QuantFormat::Int8 && sc.group >= 0) || (int4 && sc.group > 0)) ||
      sc.group % 8 != 0) {
    fail("{} does not run quantized weights ({}): it runs int8 with one scale per row or per "
         "group of a multiple of 8, and int4 in groups of a multiple of 8; use --device cpu, or a "
         "bf16 checkpoint without --quantization",
         describe(), quantization_name(sc));
  }
  const int64_t groups = q.groups();
  NV_CHECK(q.n > 0 && q.k > 0 && int64_t(q.q.size()) == q.n * q.k &&
               int64_t(q.scale.size()) == q.n * groups &&
               int64_t(q.zero.size()) == (int4 ? q.n * groups : 0),
           "cuda quantized weight [{}, {}] {}: {} codes, {} scales, {} zeros", q.n, q.k,
           quantization_name(sc), q.q.size(), q.scale.size(), q.zero.size());
  const QuantDeviceLayout l = quant_device_layout(int4, sc.group, q.n, q.k);
  std::vector<uint8_t> host(l.bytes, 0);
  for (int64_t j = 0; j < q.n; ++j) {
    const int8_t* src = q.q.data() + j * q.k;
    uint8_t* dst = host.data() + j * l.row_bytes;
    if (int4) {
      for (int64_t i = 0; i < q.k; ++i) dst[i / 2] |= uint8_t((src[i] & 15) << (4 * (i % 2)));
    } else {
      std::memcpy(dst, src, size_t(q.k));
    }
  }
  for (int64_t c = 0; c < q.n * groups; ++c) {
    uint32_t word = 0;
    if (int4) {
      const uint16_t s = f32_to_f16(q.scale[size_t(c)]), z = f32_to_f16(q.zero[size_t(c)]);
      if (f16_to_f32(s) != q.scale[size_t(c)] || f16_to_f32(z) != q.zero[size_t(c)])
        fail("cuda: int4 scale {} / zero {} of row {} group {} is not an f16 value",
             q.scale[size_t(c)], q.zero[size_t(c)], c / groups, c % groups);
      word = uint32_t(s) | (uint32_t(z) << 16);
    } else {
      std::memcpy(&word, &q.scale[size_t(c)], 4);
    }
    std::memcpy(host.data() + l.scales_offset + size_t(c) * 4, &word, 4);
  }
  LinearWeight w;
  w.n = q.n;
  w.k = q.k;
  w.quant = sc;
  w.storage = alloc(l.bytes);
  w.data = w.storage.as(DType::I32, {int64_t(l.bytes / 4)});
  upload(w.data, host.data());
  synchronize();  // `host` goes away when we return
  return w;
}

// ---- ops ----

void CudaBackend::embedding(Tensor out, Tensor ids, const LinearWeight& table) {
  use_device();
  check_act(out, "embedding out");
  NV_CHECK(out.ndim == 2 && out.shape[1] == table.k, "cuda embedding out {} for a [{}, {}] table",
           out.describe(), table.n, table.k);
  check_i32(ids, out.shape[0], "embedding ids");
  if (table.quant.enabled()) {
    launch_quant_embedding(out.ptr<uint16_t>(), out.stride[0], ids.ptr<const int32_t>(),
                           out.shape[0], quant_view(table), 0, false, stream_);
    return;
  }
  launch_embedding(out.ptr<uint16_t>(), out.stride[0], ids.ptr<const int32_t>(), out.shape[0],
                   table.data.ptr<const uint16_t>(), table.n, table.k, stream_);
}

void CudaBackend::vocab_parallel_embedding(Tensor out, Tensor ids, const LinearWeight& table,
                                           int64_t vocab_start) {
  use_device();
  check_act(out, "vocab_parallel_embedding out");
  NV_CHECK(out.ndim == 2 && out.shape[1] == table.k,
           "cuda vocab_parallel_embedding out {} for a [{}, {}] table", out.describe(), table.n,
           table.k);
  NV_CHECK(vocab_start >= 0, "vocab_start {}", vocab_start);
  check_i32(ids, out.shape[0], "vocab_parallel_embedding ids");
  if (table.quant.enabled()) {
    launch_quant_embedding(out.ptr<uint16_t>(), out.stride[0], ids.ptr<const int32_t>(),
                           out.shape[0], quant_view(table), vocab_start, true, stream_);
    return;
  }
  launch_vocab_parallel_embedding(out.ptr<uint16_t>(), out.stride[0], ids.ptr<const int32_t>(),
                                  out.shape[0], table.data.ptr<const uint16_t>(), vocab_start,
                                  table.n, table.k, stream_);
}

void CudaBackend::linear(Tensor out, Tensor x, const LinearWeight& w, const Tensor* bias) {
  use_device();
  check_act(x, "linear x");
  NV_CHECK(x.ndim == 2 && out.ndim == 2 && out.device == DeviceKind::CUDA &&
               (out.dtype == DType::BF16 || out.dtype == DType::F32) && out.stride[1] == 1 &&
               x.shape[0] == out.shape[0] && x.shape[1] == w.k && out.shape[1] == w.n,
           "cuda linear out {} = x {} @ w[{}, {}]^T", out.describe(), x.describe(), w.n, w.k);
  const uint16_t* b = nullptr;
  if (bias) {
    NV_CHECK(bias->ndim == 1 && bias->dtype == DType::BF16 && bias->shape[0] == w.n &&
                 bias->stride[0] == 1,
             "cuda linear bias {} for N = {}", bias->describe(), w.n);
    b = bias->ptr<const uint16_t>();
  }
  const int64_t m = x.shape[0];
  const bool f32 = out.dtype == DType::F32;
  if (m == 0) return;
  if (w.quant.enabled()) {
    const QuantWeightView qv = quant_view(w);
    if (gemv_eligible(m, w.k, x.stride[0], reinterpret_cast<uintptr_t>(x.data),
                      reinterpret_cast<uintptr_t>(qv.codes))) {
      launch_quant_gemv(out.data, f32, out.stride[0], x.ptr<const uint16_t>(), x.stride[0], qv, b,
                        m, stream_);
      return;
    }
    // Chunks of output rows dequantized to bf16, each through cuBLASLt into its columns of out.
    const int64_t rows = quant_dequant_chunk_rows(w.n, w.k);
    uint16_t* ws = static_cast<uint16_t*>(
        grow_workspace(dequant_ws_, size_t(rows * w.k) * 2, "linear (dequantize)"));
    const int64_t es = f32 ? 4 : 2;
    for (int64_t n0 = 0; n0 < w.n; n0 += rows) {
      const int64_t nr = std::min(rows, w.n - n0);
      launch_quant_dequantize(ws, qv, n0, nr, stream_);
      gemm_->run(static_cast<char*>(out.data) + n0 * es, f32, out.stride[0], x.data, x.stride[0],
                 ws, m, nr, w.k, stream_);
    }
    if (b) launch_add_bias(out.data, f32, out.stride[0], b, m, w.n, stream_);
    return;
  }
  if (gemv_eligible(m, w.k, x.stride[0], reinterpret_cast<uintptr_t>(x.data),
                    reinterpret_cast<uintptr_t>(w.data.data))) {
    launch_gemv(out.data, f32, out.stride[0], x.ptr<const uint16_t>(), x.stride[0],
                w.data.ptr<const uint16_t>(), b, m, w.n, w.k, stream_);
    return;
  }
  gemm_->run(out.data, f32, out.stride[0], x.data, x.stride[0], w.data.data, m, w.n, w.k, stream_);
  if (b) launch_add_bias(out.data, f32, out.stride[0], b, m, w.n, stream_);
}

void CudaBackend::rms_norm(Tensor out, Tensor x, Tensor weight, float eps) {
  use_device();
  check_act(x, "rms_norm x");
  check_act(out, "rms_norm out");
  const int64_t d = x.size(-1);
  NV_CHECK(
      same_shape(out, x) && weight.ndim == 1 && weight.dtype == DType::BF16 && weight.shape[0] == d,
      "cuda rms_norm out {} x {} weight {}", out.describe(), x.describe(), weight.describe());
  launch_rms_norm(rows_of(out), rows_of(x), weight.ptr<const uint16_t>(), d, eps, stream_);
}

void CudaBackend::add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) {
  use_device();
  check_act(x, "add_rms_norm x");
  check_act(residual, "add_rms_norm residual");
  NV_CHECK(x.ndim == 2 && residual.ndim == 2 && same_shape(x, residual) && weight.ndim == 1 &&
               weight.dtype == DType::BF16 && weight.shape[0] == x.shape[1],
           "cuda add_rms_norm x {} residual {} weight {}", x.describe(), residual.describe(),
           weight.describe());
  launch_add_rms_norm(x.ptr<uint16_t>(), x.stride[0], residual.ptr<uint16_t>(), residual.stride[0],
                      x.shape[0], weight.ptr<const uint16_t>(), x.shape[1], eps, stream_);
}

void CudaBackend::rope(Tensor x, Tensor positions, Tensor cos_sin) {
  use_device();
  check_act(x, "rope x");
  NV_CHECK(x.ndim == 3 && x.shape[2] % 2 == 0, "cuda rope x {}: expected [T, heads, D], even D",
           x.describe());
  check_i32(positions, x.shape[0], "rope positions");
  NV_CHECK(cos_sin.ndim == 2 && cos_sin.dtype == DType::F32 && cos_sin.is_contiguous() &&
               cos_sin.shape[1] == x.shape[2],
           "cuda rope cos_sin {} for x {}", cos_sin.describe(), x.describe());
  launch_rope(rows_of(x), positions.ptr<const int32_t>(), cos_sin.ptr<const float>(),
              cos_sin.shape[0], x.shape[2], stream_);
}

void CudaBackend::silu_and_mul(Tensor out, Tensor x) {
  use_device();
  check_act(x, "silu_and_mul x");
  check_act(out, "silu_and_mul out");
  NV_CHECK(
      x.ndim == 2 && out.ndim == 2 && x.shape[0] == out.shape[0] && x.shape[1] == 2 * out.shape[1],
      "cuda silu_and_mul out {} x {}", out.describe(), x.describe());
  launch_silu_and_mul(out.ptr<uint16_t>(), out.stride[0], x.ptr<const uint16_t>(), x.stride[0],
                      x.shape[0], out.shape[1], stream_);
}

void CudaBackend::store_kv(Tensor k, Tensor v, const LayerKVCache& cache,
                           const ForwardBatch& batch) {
  use_device();
  check_cache(cache);
  const int64_t hkv = cache.k.shape[2], d = cache.k.shape[3];
  for (const Tensor* t : {&k, &v}) {
    check_act(*t, "store_kv k/v");
    NV_CHECK(t->ndim == 3 && t->shape[1] == hkv && t->shape[2] == d,
             "cuda store_kv {} into a cache of {}", t->describe(), cache.k.describe());
  }
  check_i32(batch.slot_mapping, k.shape[0], "store_kv slot_mapping");
  launch_store_kv(rows_of(k), rows_of(v), d, batch.slot_mapping.ptr<const int32_t>(),
                  kv_store(cache), stream_);
}

void CudaBackend::qk_norm_rope_store_kv(Tensor q, Tensor k, Tensor v, const Tensor* q_norm,
                                        const Tensor* k_norm, float eps, Tensor positions,
                                        Tensor cos_sin, const LayerKVCache& cache,
                                        const ForwardBatch& batch) {
  use_device();
  check_cache(cache);
  const int64_t hkv = cache.k.shape[2], d = cache.k.shape[3];
  check_act(q, "qk_norm_rope_store_kv q");
  NV_CHECK(q.ndim == 3 && q.shape[2] == d && d % 2 == 0 && d <= kFusedMaxHeadDim,
           "cuda qk_norm_rope_store_kv q {} for a cache of {}", q.describe(), cache.k.describe());
  for (const Tensor* t : {&k, &v}) {
    check_act(*t, "qk_norm_rope_store_kv k/v");
    NV_CHECK(t->ndim == 3 && t->shape[0] == q.shape[0] && t->shape[1] == hkv && t->shape[2] == d,
             "cuda qk_norm_rope_store_kv {} into a cache of {}", t->describe(), cache.k.describe());
  }
  NV_CHECK((q_norm == nullptr) == (k_norm == nullptr),
           "cuda qk_norm_rope_store_kv: q_norm and k_norm go together");
  for (const Tensor* w : {q_norm, k_norm})
    NV_CHECK(!w || (w->ndim == 1 && w->dtype == DType::BF16 && w->shape[0] == d),
             "cuda qk_norm_rope_store_kv norm weight {}", w->describe());
  check_i32(positions, q.shape[0], "qk_norm_rope_store_kv positions");
  check_i32(batch.slot_mapping, q.shape[0], "qk_norm_rope_store_kv slot_mapping");
  NV_CHECK(cos_sin.ndim == 2 && cos_sin.dtype == DType::F32 && cos_sin.is_contiguous() &&
               cos_sin.shape[1] == d,
           "cuda qk_norm_rope_store_kv cos_sin {}", cos_sin.describe());
  launch_qk_norm_rope_store(
      rows_of(q), rows_of(k), rows_of(v), q_norm ? q_norm->ptr<const uint16_t>() : nullptr,
      k_norm ? k_norm->ptr<const uint16_t>() : nullptr, eps, positions.ptr<const int32_t>(),
      cos_sin.ptr<const float>(), cos_sin.shape[0], d, batch.slot_mapping.ptr<const int32_t>(),
      kv_store(cache), stream_);
}

void CudaBackend::attention_prefill(Tensor out, Tensor q, const LayerKVCache& cache,
                                    const ForwardBatch& batch, float scale) {
  use_device();
  check_attention(out, q, cache, batch, batch.num_tokens, "attention_prefill");
  check_i32(batch.cu_seqlens_q, batch.num_seqs + 1, "attention_prefill cu_seqlens_q");
  check_i32(batch.context_lens, batch.num_seqs, "attention_prefill context_lens");
  launch_attention_prefill(out.ptr<uint16_t>(), rows_of(q), int32_t(q.shape[1]),
                           paged(cache, batch), batch.cu_seqlens_q.ptr<const int32_t>(),
                           batch.context_lens.ptr<const int32_t>(), batch.num_seqs,
                           batch.max_seqlen_q, scale, stream_);
}

void CudaBackend::attention_decode(Tensor out, Tensor q, const LayerKVCache& cache,
                                   const ForwardBatch& batch, float scale) {
  use_device();
  check_attention(out, q, cache, batch, batch.num_seqs, "attention_decode");
  check_i32(batch.context_lens, batch.num_seqs, "attention_decode context_lens");
  // Partitions for the widest block table row: fixed per captured graph, and each sequence
  // uses only those its own context needs.
  const int parts = decode_num_partitions(batch.block_tables.shape[1] * cache.k.shape[1]);
  const int64_t hq = q.shape[1];
  const int64_t floats = decode_partials_floats(batch.num_seqs, hq, cache.k.shape[3], parts);
  float* ws = floats > 0 ? decode_workspace(size_t(floats)) : nullptr;
  int32_t* counters =
      floats > 0 ? decode_counters(size_t(batch.num_seqs * cache.k.shape[2])) : nullptr;
  const int grid_parts = decode_grid_partitions(batch.num_seqs, cache.k.shape[2], num_sms_, parts);
  launch_attention_decode(out.ptr<uint16_t>(), rows_of(q), int32_t(hq), paged(cache, batch),
                          batch.context_lens.ptr<const int32_t>(), batch.num_seqs, parts,
                          grid_parts, scale, ws, counters, stream_);
}

void CudaBackend::gather_rows(Tensor out, Tensor x, Tensor indices) {
  use_device();
  NV_CHECK(out.ndim == 2 && x.ndim == 2 && out.dtype == x.dtype && out.shape[1] == x.shape[1] &&
               out.stride[1] == 1 && x.stride[1] == 1 && out.device == DeviceKind::CUDA,
           "cuda gather_rows out {} from x {}", out.describe(), x.describe());
  check_i32(indices, out.shape[0], "gather_rows indices");
  const int64_t es = int64_t(dtype_size(x.dtype));
  NV_CHECK(es % 2 == 0, "cuda gather_rows of {}", dtype_name(x.dtype));
  launch_gather_rows(out.data, out.stride[0] * es, x.data, x.stride[0] * es, x.shape[0],
                     indices.ptr<const int32_t>(), out.shape[0], x.shape[1] * es, stream_);
}

bool CudaBackend::device_sampler_serves(const HostBatch& host, int64_t vocab) {
  for (int32_t k : host.top_k)
    if (k > kMaxDeviceTopK && k < vocab) return false;
  // Logit processing, min_p and logprobs (runtime/sampling_batch.h, when HostBatch carries it):
  // host.
  // A structured-output bitmask alone is applied on the device (apply_token_bitmask).
  return [](const auto& h) {
    if constexpr (requires { h.sampling.processes_logits(); }) {
      return !h.sampling.processes_logits();
    } else {
      return true;
    }
  }(host);
}

void CudaBackend::apply_token_bitmask(Tensor logits, const SamplingBatch& sampling) {
  const int64_t num = logits.shape[0], v = logits.shape[1];
  const int64_t words = sampling.bitmask_words;
  NV_CHECK(words * 32 >= v && int64_t(sampling.has_bitmask.size()) >= num &&
               int64_t(sampling.bitmask.size()) >= num * words,
           "cuda sample: a bitmask of {} words for {} tokens, {} rows for {} seqs", words, v,
           sampling.has_bitmask.size(), num);
  const size_t n_words = size_t(num * words);
  mask_staging_.assign(sampling.bitmask.begin(), sampling.bitmask.begin() + int64_t(n_words));
  for (int64_t b = 0; b < num; ++b) mask_staging_.push_back(sampling.has_bitmask[size_t(b)]);
  const size_t bytes = mask_staging_.size() * sizeof(uint32_t);
  if (mask_buf_.bytes() < bytes) mask_buf_ = alloc(bytes);
  Tensor dev = mask_buf_.as(DType::I32, {int64_t(mask_staging_.size())});
  upload(dev, mask_staging_.data());
  const uint32_t* mask = static_cast<const uint32_t*>(mask_buf_.data());
  launch_apply_token_bitmask(logits.ptr<float>(), logits.stride[0], num, v, mask,
                             int32_t(words), mask + n_words, stream_);
}

namespace {

// Whether the device sampler may leave seq b to the host (-1): top-p alone over a vocabulary
// wider than its candidates.
bool may_defer(const HostBatch& h, size_t b, int64_t vocab) {
  const bool top_k = b < h.top_k.size() && h.top_k[b] > 0 && h.top_k[b] < vocab;
  return h.temperatures[b] != 0.0f && !top_k && b < h.top_p.size() && h.top_p[b] < 1.0f &&
         vocab > kMaxDeviceTopK;
}

}  // namespace

void CudaBackend::sample(Tensor out, Tensor logits, const ForwardBatch& batch) {
  use_device();
  NV_CHECK(logits.ndim == 2 && logits.dtype == DType::F32 && logits.stride[1] == 1 &&
               logits.device == DeviceKind::CUDA,
           "cuda sample logits {}: expected f32 [B, V]", logits.describe());
  NV_CHECK(out.ndim == 1 && out.dtype == DType::I32 && out.stride[0] == 1 &&
               out.shape[0] == logits.shape[0],
           "cuda sample out {} for logits {}", out.describe(), logits.describe());
  NV_CHECK(batch.host != nullptr, "cuda sample reads ForwardBatch::host to choose its path");
  const HostBatch& hb = *batch.host;
  const int64_t num = logits.shape[0], v = logits.shape[1];
  if (num == 0) return;
  NV_CHECK(int64_t(hb.temperatures.size()) >= num, "cuda sample: {} temperatures for {} seqs",
           hb.temperatures.size(), num);
  std::vector<int32_t> tokens(static_cast<size_t>(num));
  std::vector<int64_t> rows;  // the seqs the host samples
  if (device_sampler_serves(hb, v)) {
    // In place: masked logits stay masked for the host too (top-p alone deferred below). No seq
    // of this step wants logprobs (processes_logits), so nothing reads the raw logits after.
    if (!hb.sampling.bitmask.empty()) apply_token_bitmask(logits, hb.sampling);
    for (const Tensor* t : {&batch.temperatures, &batch.top_k, &batch.top_p, &batch.seeds,
                            &batch.sample_offsets})
      NV_CHECK(t->ndim == 1 && t->shape[0] >= num && t->stride[0] == 1, "cuda sample field {}",
               t->describe());
    launch_sample(out.ptr<int32_t>(), logits.ptr<const float>(), logits.stride[0], num, v,
                  batch.temperatures.ptr<const float>(), batch.top_k.ptr<const int32_t>(),
                  batch.top_p.ptr<const float>(), batch.seeds.ptr<const int64_t>(),
                  batch.sample_offsets.ptr<const int64_t>(), stream_);
    bool deferrable = false;
    for (int64_t b = 0; b < num; ++b) deferrable = deferrable || may_defer(hb, size_t(b), v);
    if (!deferrable) return;
    download(tokens.data(), out);
    for (int64_t b = 0; b < num; ++b)
      if (tokens[size_t(b)] < 0) rows.push_back(b);
    if (rows.empty()) return;
  } else {
    for (int64_t b = 0; b < num; ++b) rows.push_back(b);
  }
  // The host sampler: the CPU backend's exact implementation on the downloaded logits of `rows`.
  const int64_t n = int64_t(rows.size());
  std::vector<float> host_logits(static_cast<size_t>(n * v));
  HostBatch sub;
  if (n == num) {
    NV_CUDA_CHECK("sample (host path)",
                  cudaMemcpy2DAsync(host_logits.data(), size_t(v) * 4, logits.data,
                                    size_t(logits.stride[0]) * 4, size_t(v) * 4, size_t(num),
                                    cudaMemcpyDeviceToHost, stream_));
  }
  for (int64_t r = 0; r < n; ++r) {
    const size_t b = size_t(rows[size_t(r)]);
    if (n != num) {
      NV_CUDA_CHECK("sample (host path)",
                    cudaMemcpyAsync(host_logits.data() + r * v,
                                    logits.ptr<const float>() + int64_t(b) * logits.stride[0],
                                    size_t(v) * 4, cudaMemcpyDeviceToHost, stream_));
    }
    sub.temperatures.push_back(hb.temperatures[b]);
    sub.top_k.push_back(b < hb.top_k.size() ? hb.top_k[b] : 0);
    sub.top_p.push_back(b < hb.top_p.size() ? hb.top_p[b] : 1.0f);
    sub.seeds.push_back(b < hb.seeds.size() ? hb.seeds[b] : 0);
    sub.sample_offsets.push_back(b < hb.sample_offsets.size() ? hb.sample_offsets[b] : 0);
  }
  synchronize();
  ForwardBatch fb;
  const ForwardBatch* host_batch = &batch;
  if (n != num) {  // a subset: the device path ran, so no processing or min_p applies
    fb.host = &sub;
    fb.num_seqs = int(n);
    host_batch = &fb;
  }
  std::vector<int32_t> got(static_cast<size_t>(n));
  host_sampler_->sample(Tensor::contiguous(got.data(), DType::I32, {n}),
                        Tensor::contiguous(host_logits.data(), DType::F32, {n, v}), *host_batch);
  for (int64_t r = 0; r < n; ++r) tokens[size_t(rows[size_t(r)])] = got[size_t(r)];
  upload(out, tokens.data());
  synchronize();
}

}  // namespace nanovllm::cuda
