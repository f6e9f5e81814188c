// The CUDA emulator itself (label cuda_emu): a test double is only worth what it catches, so
// each check a GPU (or compute-sanitizer) would make is shown to fire here, and the semantics
// the backend relies on (barriers, shuffles, graph capture recording instead of running,
// stream-order copies) are shown to hold.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "nanovllm_cuda_emu.h"
#include "runtime/tensor.h"

namespace nanovllm::cuda_emu {
namespace {

// Device buffer of n T, freed at scope exit.
template <typename T>
struct DevBuf {
  T* p = nullptr;
  explicit DevBuf(size_t n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  std::vector<T> get(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// Each thread writes its linear id; block b adds 1000 * b.
__global__ void ids_kernel(int* out) {
  const int t = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int b = int(blockIdx.x + gridDim.x * blockIdx.y);
  out[b * int(blockDim.x * blockDim.y * blockDim.z) + t] = 1000 * b + t;
}

TEST(CudaEmu, GridAndBlockIndices) {
  DevBuf<int> out(2 * 3 * 4 * 2 * 8);
  ids_kernel % Launch(dim3(2, 3), dim3(4, 2, 8))(out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> h = out.get(2 * 3 * 64);
  for (int b = 0; b < 6; ++b)
    for (int t = 0; t < 64; ++t) ASSERT_EQ(h[size_t(b * 64 + t)], 1000 * b + t);
}

// Shared memory reversal across warps: wrong without a real barrier between write and read.
__global__ void reverse_kernel(int* out) {
  __shared__ int buf[256];
  const int t = int(threadIdx.x);
  buf[t] = t * 3;
  __syncthreads();
  out[t] = buf[255 - t];
}

TEST(CudaEmu, SyncthreadsOrdersSharedMemory) {
  DevBuf<int> out(256);
  reverse_kernel % Launch(1, 256)(out.p);
  const std::vector<int> h = out.get(256);
  for (int t = 0; t < 256; ++t) ASSERT_EQ(h[size_t(t)], (255 - t) * 3);
}

// Butterfly sum and a rotation by shuffles, in every warp of a 96-thread block.
__global__ void shuffle_kernel(float* sums, int* rotated) {
  const int lane = int(threadIdx.x % 32);
  float v = float(threadIdx.x);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  sums[threadIdx.x] = v;
  rotated[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), (lane + 1) % 32);
}

TEST(CudaEmu, WarpShufflesExchangeWithinTheWarp) {
  DevBuf<float> sums(96);
  DevBuf<int> rot(96);
  shuffle_kernel % Launch(1, 96)(sums.p, rot.p);
  const std::vector<float> s = sums.get(96);
  const std::vector<int> r = rot.get(96);
  for (int t = 0; t < 96; ++t) {
    const int w = t / 32;
    ASSERT_EQ(s[size_t(t)], float(32 * 32 * w + 31 * 16)) << t;  // sum of the warp's ids
    ASSERT_EQ(r[size_t(t)], w * 32 + (t % 32 + 1) % 32) << t;
  }
}

// D = C + A * B through the emulated mma.sync.m16n8k16, each lane giving and taking its
// fragments in the PTX ISA's layout (g = lane / 4, t = lane % 4), in each of two warps with its
// own A and C. A [2][16][16] and B [16][8] (k, n) as bf16 bits, C and D [2][16][8] f32.
__global__ void mma_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const uint16_t* A = a + warp * 256;
  const auto pair = [](uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); };
  const auto a_at = [&](int row, int k) { return pair(A[row * 16 + k], A[row * 16 + k + 1]); };
  const auto b_at = [&](int k) { return pair(b[k * 8 + g], b[(k + 1) * 8 + g]); };
  const uint32_t frag[4] = {a_at(g, 2 * t), a_at(g + 8, 2 * t), a_at(g, 2 * t + 8),
                            a_at(g + 8, 2 * t + 8)};
  const int at[4] = {g * 8 + 2 * t, g * 8 + 2 * t + 1, (g + 8) * 8 + 2 * t,
                     (g + 8) * 8 + 2 * t + 1};
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[warp * 128 + at[i]];
  emu::mma_bf16_m16n8k16(acc, frag, b_at(2 * t), b_at(2 * t + 8));
  for (int i = 0; i < 4; ++i) d[warp * 128 + at[i]] = acc[i];
}

TEST(CudaEmu, MmaFollowsThePtxFragmentLayout) {
  // Quarters in [-4, 4]: exact in bf16, and every product and sum exact in f32, so D must equal
  // the plain product whatever the order of summation; a fragment in the wrong place cannot.
  std::vector<float> fa(512), fb(128), fc(256);
  for (size_t i = 0; i < fa.size(); ++i) fa[i] = float(int(i * 7 % 33) - 16) / 4;
  for (size_t i = 0; i < fb.size(); ++i) fb[i] = float(int(i * 5 % 29) - 14) / 4;
  for (size_t i = 0; i < fc.size(); ++i) fc[i] = float(int(i % 13) - 6);
  std::vector<uint16_t> ha(512), hb(128);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = f32_to_bf16(fa[i]);
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = f32_to_bf16(fb[i]);
  DevBuf<uint16_t> a(512), b(128);
  DevBuf<float> c(256), d(256);
  ASSERT_EQ(cudaMemcpy(a.p, ha.data(), 1024, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.p, hb.data(), 256, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.p, fc.data(), 1024, cudaMemcpyHostToDevice), cudaSuccess);
  mma_kernel % Launch(1, 64)(a.p, b.p, c.p, d.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = d.get(256);
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        float want = fc[size_t(w * 128 + i * 8 + j)];
        for (int k = 0; k < 16; ++k)
          want += fa[size_t(w * 256 + i * 16 + k)] * fb[size_t(k * 8 + j)];
        ASSERT_EQ(got[size_t(w * 128 + i * 8 + j)], want)
            << "warp " << w << " D[" << i << "][" << j << "]";
      }
}

// Threads 0..31 only reach the barrier: the others exit (they count as arrived), as on sm_70+.
__global__ void early_exit_kernel(int* out) {
  __shared__ int x;
  if (threadIdx.x >= 32) return;
  if (threadIdx.x == 0) x = 7;
  __syncthreads();
  out[threadIdx.x] = x;
}

TEST(CudaEmu, ExitedThreadsDoNotBlockBarriers) {
  DevBuf<int> out(32);
  early_exit_kernel % Launch(1, 128)(out.p);
  for (int v : out.get(32)) ASSERT_EQ(v, 7);
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  __syncwarp();
  out[threadIdx.x] = 1;
}

__global__ void partial_mask_kernel(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, float(threadIdx.x), 1);
}

__global__ void exited_lane_kernel(float* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, float(threadIdx.x), 3);
}

__global__ void partial_warp_mma_kernel(float* out) {
  float c[4] = {};
  const uint32_t a[4] = {};
  emu::mma_bf16_m16n8k16(c, a, 0, 0);
  out[threadIdx.x] = c[0];
}

__global__ void write_kernel(int* out) { out[threadIdx.x] = 1; }

TEST(CudaEmuDeathTest, ReportsWhatAGpuWouldHangOrFaultOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DevBuf<int> out(64);
  DevBuf<float> f(64);
  EXPECT_DEATH(divergent_barrier_kernel % Launch(1, 64)(out.p), "deadlock in block");
  EXPECT_DEATH(partial_mask_kernel % Launch(1, 32)(f.p), "partial warp masks are not emulated");
  EXPECT_DEATH(exited_lane_kernel % Launch(1, 32)(f.p), "exited");
  // mma.sync needs the whole warp: a 16-thread block has no lanes 16..31 to give fragments.
  EXPECT_DEATH(partial_warp_mma_kernel % Launch(1, 16)(f.p), "mma.sync.m16n8k16 reads lane 16");
  std::vector<int> host(64);
  EXPECT_DEATH(write_kernel % Launch(1, 64)(host.data()), "not device memory");
  int big = 0;
  EXPECT_DEATH(cudaMemcpy(out.p, &big, 65 * sizeof(int), cudaMemcpyHostToDevice),
               "not inside one cudaMalloc'd buffer");
}

#if defined(__SANITIZE_ADDRESS__)
__global__ void past_the_end_kernel(const int* in, int* out) {
  out[threadIdx.x] = in[threadIdx.x + 1];
}

// Under ASan (the asan preset runs this label) a kernel's access past its buffer is caught, as
// compute-sanitizer's memcheck catches it on a GPU.
TEST(CudaEmuDeathTest, AsanCatchesAKernelReadingPastItsBuffer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DevBuf<int> in(30), out(32);
  EXPECT_DEATH(past_the_end_kernel % Launch(1, 30)(in.p, out.p), "heap-buffer-overflow");
}
#endif

TEST(CudaEmu, LaunchesTheDriverWouldRefuseSetTheLastError) {
  DevBuf<int> out(2048);
  write_kernel % Launch(1, 2048)(out.p);  // more than 1024 threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);     // read and cleared
  write_kernel % Launch(1, 32, 64 << 10)(out.p);  // 64 KiB dynamic smem without the attribute
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(
      cudaFuncSetAttribute(write_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10),
      cudaSuccess);
  write_kernel % Launch(1, 32, 64 << 10)(out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaEmu, FreshMemoryReadsAsPoison) {
  DevBuf<uint32_t> b(16);
  for (uint32_t v : b.get(16)) EXPECT_EQ(v, 0xffffffffu);
}

__global__ void add_kernel(int* x, int v) { x[threadIdx.x] += v; }

// A capture records kernels, copies and memsets without running them; each launch of the graph
// runs them in order with the arguments they had at capture.
TEST(CudaEmu, GraphCaptureRecordsAndReplays) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  DevBuf<int> x(32), y(32);
  ASSERT_EQ(cudaMemsetAsync(x.p, 0, 32 * sizeof(int), s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  add_kernel % Launch(1, 32, 0, s)(x.p, 5);
  ASSERT_EQ(cudaMemcpyAsync(y.p, x.p, 32 * sizeof(int), cudaMemcpyDeviceToDevice, s), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);  // unsafe while capturing
  std::vector<int> host(32);
  EXPECT_EQ(cudaMemcpyAsync(host.data(), x.p, 128, cudaMemcpyDeviceToHost, s),
            cudaErrorStreamCaptureUnsupported);  // pageable host memory
  cudaGetLastError();
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  for (int v : x.get(32)) ASSERT_EQ(v, 0);  // nothing ran during the capture
  cudaGraphExec_t e = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(e, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(e, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (int v : x.get(32)) ASSERT_EQ(v, 10);
  for (int v : y.get(32)) ASSERT_EQ(v, 10);
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST(CudaEmu, SynchronizingDuringCaptureInvalidatesIt) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  cudaGetLastError();
  cudaStreamDestroy(s);
}

// cuBLASLt's column-major D = op(A) op(B), as the backend's LtGemm sets it up (A transposed).
TEST(CudaEmu, CublasLtMatmulFollowsItsDescriptors) {
  const int m = 3, n = 2, k = 4;  // D [m, n] = A^T [m, k] @ B [k, n]; A stored [k, m]
  std::vector<uint16_t> a(size_t(k * m)), b(size_t(k * n));
  auto bf = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t(u >> 16);
  };
  for (int i = 0; i < k * m; ++i) a[size_t(i)] = bf(float(i + 1));
  for (int i = 0; i < k * n; ++i) b[size_t(i)] = bf(float(i % 3) - 1.0f);
  DevBuf<uint16_t> da(a.size()), db(b.size());
  DevBuf<float> dd(size_t(m * n));
  cudaMemcpy(da.p, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db.p, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  ASSERT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t t = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
  cublasLtMatmulAlgo_t algo{};
  algo.data[0] = 1;
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasLtMatmul(h, desc, &one, da.p, la, db.p, lb, &zero, dd.p, ld, dd.p, ld, &algo,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> d = dd.get(size_t(m * n));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float want = 0.0f;
      for (int l = 0; l < k; ++l) want += float(l + i * k + 1) * (float((l + j * k) % 3) - 1.0f);
      EXPECT_EQ(d[size_t(i + j * m)], want) << i << "," << j;
    }
  // A layout that does not fit the product is refused, as cuBLASLt does.
  cublasLtMatrixLayout_t bad = nullptr;
  cublasLtMatrixLayoutCreate(&bad, CUDA_R_16BF, k + 1, n, k + 1);
  EXPECT_EQ(cublasLtMatmul(h, desc, &one, da.p, la, db.p, bad, &zero, dd.p, ld, dd.p, ld, &algo,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  for (auto* l : {la, lb, ld, bad}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);
}

}  // namespace
}  // namespace nanovllm::cuda_emu
