#pragma once
// A CUDA emulator for the CPU: the CUDA backend's own sources (src/backend/cuda: the .cu kernels,
// cuda_backend.cpp, gemm.cpp) compiled by g++ against this header instead of the CUDA toolkit, so
// the `cuda_emu` tests run them here, on machines without a GPU. It is a test double, written
// to catch what a GPU would catch and more:
//   - each CTA runs its threads as fibers on one OS thread; __syncthreads, __syncwarp and the
//     warp shuffles are real barriers between them, so a barrier that some threads of a block
//     (or lanes of a warp) never reach is reported as a deadlock, and a shuffle that reads an
//     exited lane or uses a partial mask is an error; the tensor-core mma.sync is one such
//     warp-wide step too (emu::mma_bf16_m16n8k16), which needs all 32 lanes;
//   - launches are validated as the driver does (block size, grid extents, dynamic shared
//     memory over 48 KiB without cudaFuncSetAttribute); a kernel's pointer arguments must point
//     into cudaMalloc'd memory; cudaMalloc'd memory and dynamic shared memory start as 0xff bytes
//     (NaN in bf16/f32, -1 in i32), so reading what nobody wrote shows;
//   - streams run in order at enqueue time; while a stream is capturing, kernels, copies, memsets
//     and cuBLASLt matmuls are recorded (their arguments by value, as CUDA does) and run only
//     when the graph is launched; synchronizing or allocating during a capture is an error;
//   - cuBLASLt is a plain fp32-accumulating matmul over the descriptors it was given (layouts,
//     transposes and types checked).
// <nccl.h> is emulated too (include/nccl.h, emu_nccl.cpp), for ranks that are threads.
// The emulated machine: NANOVLLM_CUDA_EMU_DEVICES GPUs (default 2) sharing
// NANOVLLM_CUDA_EMU_MEMORY_MB of memory (default 2048), NANOVLLM_CUDA_EMU_SMS SMs each (default
// 8: from 32 (sequence, kv head) pairs on, the decode grid has one CTA per pair, which loops over
// the sequence's partitions), compute capability 9.0.
// What it cannot show: speed, the GPU's memory model between CTAs (they run one after another),
// the last bits of fast-math intrinsics, and cuBLASLt's own kernels.
//
// The header stands in for <cuda_runtime.h>, <cuda_runtime_api.h>, <cuda_fp16.h>, <cuda_fp8.h>,
// <cuda_bf16.h> and <cublasLt.h> (tests/cuda_emu/include has a file of each name). Everything
// lives in namespace nanovllm::cuda_emu: the emulated build compiles with -Dcuda=cuda_emu, so
// the backend's namespace nanovllm::cuda becomes that one and never meets the real backend's
// symbols when both are linked. `kernel<<<grid, block, smem, stream>>>(args)` is rewritten at
// build time (rewrite_launches.cmake) to `kernel % Launch(grid, block, smem, stream)(args)`.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// Static shared memory: one copy per OS thread, shared by the fibers (threads) of the CTA that
// runs there, as a CTA's threads share it.
#define __shared__ static thread_local
#define threadIdx (::nanovllm::cuda_emu::emu_thread_idx())
#define blockIdx (::nanovllm::cuda_emu::emu_block_idx())
#define blockDim (::nanovllm::cuda_emu::emu_block_dim())
#define gridDim (::nanovllm::cuda_emu::emu_grid_dim())

namespace nanovllm::cuda_emu {

// ---- vector types ----
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
constexpr int warpSize = 32;

// ---- device functions ----
const uint3& emu_thread_idx();
const uint3& emu_block_idx();
const dim3& emu_block_dim();
const dim3& emu_grid_dim();

void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);

namespace emu {
// Reports a fault of the emulated program ("CUDA emulator: <msg>" on stderr) and aborts, as a
// GPU fault ends its context.
[[noreturn]] void die(const std::string& msg);

// One exchange among the lanes of the calling warp: every live lane publishes its value (up to
// 8 bytes, zero-extended) and gets lane `src`'s (one warp barrier). Fails on a partial mask or a
// lane that did not publish.
uint64_t shuffle(unsigned mask, uint64_t mine, int src, const char* what);

template <typename T>
T shuffle_value(unsigned mask, T v, int src, const char* what) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  const uint64_t got = shuffle(mask, bits, src, what);
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}
int lane_id();
unsigned char* dynamic_shared();

// The tensor-core instruction mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, which the
// emulator executes as the hardware does: one warp-wide step (one warp barrier) in which every
// lane gives its fragments of A and B and gets its part of D += A * B, in the register layout
// of the PTX ISA ("Matrix Fragments for mma.m16n8k16"). With g = lane / 4 and t = lane % 4 a
// lane holds a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9],
// a[3] = A[g+8][2t+8, 2t+9], b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g] (each u32 two bf16,
// the lower index in the low half) and c[0..1] = D[g][2t, 2t+1], c[2..3] = D[g+8][2t, 2t+1].
// Products are summed in f32, k in the order (2kk, 2kk+1, 2kk+8, 2kk+9) for kk = 0..3.
void mma_bf16_m16n8k16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1);
}  // namespace emu

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a <= 8-byte value");
  const int lane = emu::lane_id();
  const int src = (lane & ~(width - 1)) + (src_lane & (width - 1));
  return emu::shuffle_value(mask, v, src, "__shfl_sync");
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a <= 8-byte value");
  const int lane = emu::lane_id();
  int src = lane ^ lane_mask;
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;  // outside the segment: own
  return emu::shuffle_value(mask, v, src, "__shfl_xor_sync");
}

template <typename A, typename B>
inline auto min(A a, B b) -> std::common_type_t<A, B> {
  return b < a ? b : a;
}
template <typename A, typename B>
inline auto max(A a, B b) -> std::common_type_t<A, B> {
  return a < b ? b : a;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcg(const T* p) {  // through L2 on the GPU; one memory here
  return *p;
}
// Orders a thread's writes before its later ones as other CTAs see them: CTAs run one after
// another here, so every write is seen already.
inline void __threadfence() {}
// A CTA's threads are fibers that switch only at barriers, and CTAs run one after another, so a
// read-modify-write is atomic here as it is on the GPU.
template <typename T>
inline T atomicAdd(T* p, T v) {
  static_assert(std::is_arithmetic_v<T>, "atomicAdd of an arithmetic type");
  const T old = *p;
  *p = old + v;
  return old;
}

// ---- runtime API ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;

struct EmuStream;
struct EmuGraph;
using cudaStream_t = EmuStream*;
using cudaGraph_t = EmuGraph*;
using cudaGraphExec_t = EmuGraph*;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int major, minor;
  int multiProcessorCount;
  int maxThreadsPerBlock;
  int warpSize;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);

namespace emu {
cudaError_t set_function_attribute(const void* fn, cudaFuncAttribute attr, int value);

struct LaunchConfig {
  dim3 grid, block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
};

// Validates a launch (setting the thread's last error and returning false when the driver would
// refuse it) and checks that each non-null pointer argument points into device memory.
bool validate_launch(const LaunchConfig& cfg, const void* fn, const void* const* ptrs,
                     size_t nptrs);
// Runs (or, while `cfg.stream` captures, records) the grid, calling body() on every thread.
void submit_grid(const LaunchConfig& cfg, std::function<void()> body);
// Runs or records a host-side operation in stream order (copies, memsets, matmuls).
void submit_op(cudaStream_t stream, std::function<void()> op);
bool is_device_pointer(const void* p);
// Whether [p, p + bytes) lies inside one cudaMalloc'd buffer.
bool is_device_range(const void* p, size_t bytes);

template <typename... A>
struct PendingLaunch {
  LaunchConfig cfg;
  std::tuple<std::decay_t<A>...> args;
};

struct Launch {
  LaunchConfig cfg;
  Launch(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr)
      : cfg{grid, block, smem, stream} {}
  template <typename... A>
  PendingLaunch<A...> operator()(A&&... a) const {
    return {cfg, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
  }
};

template <typename T>
void pointer_arg(const T& v, const void** out, size_t* n) {
  if constexpr (std::is_pointer_v<T>) out[(*n)++] = static_cast<const void*>(v);
}
template <typename Tuple, size_t... I>
void pointer_args(const Tuple& t, const void** out, size_t* n, std::index_sequence<I...>) {
  (pointer_arg(std::get<I>(t), out, n), ...);
}

// kernel % Launch(...)(args): the arguments convert to the kernel's parameter types here, at the
// launch, and are kept by value (as CUDA copies them into the launch).
template <typename... P, typename... A>
void operator%(void (*kernel)(P...), PendingLaunch<A...>&& launch) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
  using Params = std::tuple<std::remove_cv_t<P>...>;
  Params params = std::make_from_tuple<Params>(std::move(launch.args));
  const void* ptrs[sizeof...(P) + 1] = {};
  size_t n = 0;
  pointer_args(params, ptrs, &n, std::index_sequence_for<P...>{});
  if (!validate_launch(launch.cfg, reinterpret_cast<const void*>(kernel), ptrs, n)) return;
  submit_grid(launch.cfg, [kernel, params]() { std::apply(kernel, params); });
}
}  // namespace emu

using emu::Launch;

template <typename F>
cudaError_t cudaFuncSetAttribute(F* fn, cudaFuncAttribute attr, int value) {
  return emu::set_function_attribute(reinterpret_cast<const void*>(fn), attr, value);
}

// ---- cuda_fp16.h / cuda_fp8.h: only the types the kernels name outside sm_89+ paths ----
using __nv_fp8x2_storage_t = unsigned short;
using __nv_fp8_storage_t = unsigned char;

// ---- cuBLASLt ----
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
enum cublasLtMatmulAlgoConfigAttributes_t { CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 3 };

struct EmuLtHandle;
struct EmuLtDesc;
struct EmuLtLayout;
struct EmuLtPreference;
using cublasLtHandle_t = EmuLtHandle*;
using cublasLtMatmulDesc_t = EmuLtDesc*;
using cublasLtMatrixLayout_t = EmuLtLayout*;
using cublasLtMatmulPreference_t = EmuLtPreference*;
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned);
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, size_t size, size_t* written);
cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                       cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                       const cublasLtMatmulAlgo_t* algo,
                                       cublasLtMatmulHeuristicResult_t* result);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);

}  // namespace nanovllm::cuda_emu

// The communicators (src/distributed) and some tests call the runtime from namespace nanovllm,
// where the real headers' names are global.
namespace nanovllm {
using namespace ::nanovllm::cuda_emu;  // NOLINT(google-build-using-namespace)
}  // namespace nanovllm
