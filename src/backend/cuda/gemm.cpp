// LtGemm: see gemm.h. Row-major out[M, N] = x[M, K] @ w[N, K]^T is, column-major,
// D[N, M] = op(A)[N, K] @ B[K, M] with A = w stored [K, N] (transposed) and B = x stored [K, M].
#include "backend/cuda/gemm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.h"
#include "util/check.h"

namespace nanovllm::cuda {

namespace {

int alignment(const void* p, int64_t ld, size_t elem) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p) | uintptr_t(256);
  if (ld > 0) a |= uintptr_t(ld) * elem;
  return int(a & (~a + 1));  // lowest set bit, at most 256
}

}  // namespace

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

// Descriptors of the product for m rows (the key's other fields).
void make_descriptors(cublasLtMatmulDesc_t* desc, cublasLtMatrixLayout_t* a,
                      cublasLtMatrixLayout_t* b, cublasLtMatrixLayout_t* c, int64_t m, int64_t n,
                      int64_t k, int64_t ldx, int64_t ldo, bool out_f32) {
  NV_CUBLAS_CHECK("linear", cublasLtMatmulDescCreate(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  NV_CUBLAS_CHECK("linear", cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                           sizeof(ta)));
  NV_CUBLAS_CHECK("linear", cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                           sizeof(tb)));
  NV_CUBLAS_CHECK("linear",
                  cublasLtMatrixLayoutCreate(a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k));
  NV_CUBLAS_CHECK("linear",
                  cublasLtMatrixLayoutCreate(b, CUDA_R_16BF, uint64_t(k), uint64_t(m), ldx));
  NV_CUBLAS_CHECK("linear", cublasLtMatrixLayoutCreate(c, out_f32 ? CUDA_R_32F : CUDA_R_16BF,
                                                       uint64_t(n), uint64_t(m), ldo));
}

}  // namespace

LtGemm::LtGemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  NV_CUBLAS_CHECK("linear (cublasLt init)", cublasLtCreate(&handle_));
  NV_CUDA_CHECK("linear (workspace)", cudaMalloc(&workspace_, workspace_bytes_));
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

cublasLtMatmulAlgo_t LtGemm::choose(const Key& key, int64_t heuristic_m) {
  const auto [m, n, k, ldx, ldo, out_f32, align_o, align_x, align_w] = key;
  Plan p;
  make_descriptors(&p.desc, &p.a, &p.b, &p.c, heuristic_m, n, k, ldx, ldo, out_f32);
  cublasLtMatmulPreference_t pref = nullptr;
  NV_CUBLAS_CHECK("linear", cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t ao = uint32_t(align_o), ax = uint32_t(align_x), aw = uint32_t(align_w);
  NV_CUBLAS_CHECK("linear", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  NV_CUBLAS_CHECK("linear", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw, sizeof(aw)));
  NV_CUBLAS_CHECK("linear", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax, sizeof(ax)));
  NV_CUBLAS_CHECK("linear", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ao, sizeof(ao)));
  NV_CUBLAS_CHECK("linear", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ao, sizeof(ao)));
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c,
                                                           pref, kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    fail("cuda linear: cuBLASLt has no algorithm for [{}, {}] x [{}, {}]^T (status {})", m, k, n, k,
         int(st));
  // The best-ranked one without split-K: a split-K algorithm divides K by a count that may depend
  // on M, so the rows of one bucket (graphs on, eager off) could round differently.
  for (int i = 0; i < found; ++i) {
    int32_t splits = 1;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                             &splits, sizeof(splits),
                                             &written) == CUBLAS_STATUS_SUCCESS &&
        splits <= 1)
      return results[i].algo;
  }
  return results[0].algo;
}

LtGemm::Plan& LtGemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  if (plans_.size() > 4096) plans_.clear();  // prefill chunk sizes are many; keep the map small
  const auto [m, n, k, ldx, ldo, out_f32, align_o, align_x, align_w] = key;
  auto p = std::make_unique<Plan>();
  make_descriptors(&p->desc, &p->a, &p->b, &p->c, m, n, k, ldx, ldo, out_f32);
  Key bucket = key;
  std::get<0>(bucket) = gemm_algo_m(m);
  auto a = algos_.find(bucket);
  if (a == algos_.end()) a = algos_.emplace(bucket, choose(bucket, std::get<0>(bucket))).first;
  p->algo = a->second;
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle_, p->desc, p->a, p->b, p->c, p->c, &p->algo, &check) !=
          CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > workspace_bytes_) {
    p->algo = choose(key, m);  // the bucket's algorithm does not fit this m: its own
  }
  return *plans_.emplace(key, std::move(p)).first->second;
}

void LtGemm::run(void* out, bool out_f32, int64_t ldo, const void* x, int64_t ldx, const void* w,
                 int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const Key key{m,
                n,
                k,
                ldx,
                ldo,
                out_f32,
                alignment(out, ldo, out_f32 ? 4 : 2),
                alignment(x, ldx, 2),
                alignment(w, k, 2)};
  Plan& p = plan(key);
  const float alpha = 1.0f, beta = 0.0f;
  NV_CUBLAS_CHECK("linear",
                  cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c,
                                 &p.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace nanovllm::cuda
