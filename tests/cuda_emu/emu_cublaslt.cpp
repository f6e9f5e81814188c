// The CUDA emulator's cuBLASLt (see include/nanovllm_cuda_emu.h): descriptors are checked as
// cuBLASLt checks them, and the matmul is a plain column-major product accumulated in fp32,
// enqueued on the stream (so a capture records it).
#include <memory>
#include <vector>

#include "nanovllm_cuda_emu.h"
#include "runtime/tensor.h"

namespace nanovllm::cuda_emu {

struct EmuLtHandle {};
struct EmuLtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct EmuLtLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct EmuLtPreference {
  uint64_t max_workspace = 0;
};

namespace {

bool supported_type(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }
size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

float load(const void* p, cudaDataType_t t, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

void store(void* p, cudaDataType_t t, size_t i, float f) {
  if (t == CUDA_R_32F)
    static_cast<float*>(p)[i] = f;
  else
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(f);  // round to nearest even, as the GPU
}

// Shapes of D = op(A) op(B) (+ C): op(A) is m x k, op(B) k x n, C and D m x n.
bool shapes(const EmuLtDesc* desc, const EmuLtLayout* a, const EmuLtLayout* b, const EmuLtLayout* c,
            const EmuLtLayout* d, uint64_t* m, uint64_t* n, uint64_t* k) {
  if (!desc || !a || !b || !c || !d) return false;
  const uint64_t am = desc->transa == CUBLAS_OP_N ? a->rows : a->cols;
  const uint64_t ak = desc->transa == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t bk = desc->transb == CUBLAS_OP_N ? b->rows : b->cols;
  const uint64_t bn = desc->transb == CUBLAS_OP_N ? b->cols : b->rows;
  if (ak != bk || c->rows != am || c->cols != bn || d->rows != am || d->cols != bn) return false;
  for (const EmuLtLayout* l : {a, b, c, d})
    if (!supported_type(l->type) || l->ld < int64_t(l->rows) || l->rows == 0 || l->cols == 0)
      return false;
  if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF || c->type != d->type) return false;
  *m = am;
  *n = bn;
  *k = ak;
  return true;
}

size_t span_bytes(const EmuLtLayout* l) {
  return (size_t(l->ld) * (l->cols - 1) + l->rows) * type_bytes(l->type);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new EmuLtHandle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (compute != CUBLAS_COMPUTE_32F || scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new EmuLtDesc{compute, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  if (!desc || size != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasOperation_t op;
  std::memcpy(&op, buf, sizeof op);
  if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA)
    desc->transa = op;
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB)
    desc->transb = op;
  else
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!supported_type(type) || ld < int64_t(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new EmuLtLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new EmuLtPreference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&pref->max_workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;  // alignments: any algorithm here handles any alignment
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  uint64_t m, n, k;
  *returned = 0;
  if (!handle || !pref || requested < 1 || !shapes(desc, a, b, c, d, &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = 1;  // the one algorithm; no split-K
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, size_t size, size_t* written) {
  if (!algo || attr != CUBLASLT_ALGO_CONFIG_SPLITK_NUM || size != sizeof(int32_t))
    return CUBLAS_STATUS_INVALID_VALUE;
  const int32_t splits = 1;
  std::memcpy(buf, &splits, sizeof splits);
  if (written) *written = sizeof splits;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                       cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                       const cublasLtMatmulAlgo_t* algo,
                                       cublasLtMatmulHeuristicResult_t* result) {
  uint64_t m, n, k;
  if (!handle || !algo || algo->data[0] != 1 || !shapes(desc, a, b, c, d, &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  *result = cublasLtMatmulHeuristicResult_t{};
  result->algo = *algo;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  uint64_t m, n, k;
  if (!handle || !algo || algo->data[0] != 1 ||
      !shapes(desc, adesc, bdesc, cdesc, ddesc, &m, &n, &k))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (auto [p, l] : {std::pair<const void*, const EmuLtLayout*>{a, adesc}, {b, bdesc}, {d, ddesc}})
    if (!emu::is_device_range(p, span_bytes(l))) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace_bytes && !emu::is_device_range(workspace, workspace_bytes))
    return CUBLAS_STATUS_INVALID_VALUE;
  float al, be;
  std::memcpy(&al, alpha, 4);
  std::memcpy(&be, beta, 4);
  // The descriptors may be destroyed before a captured graph replays: keep copies.
  const EmuLtDesc ds = *desc;
  const EmuLtLayout la = *adesc, lb = *bdesc, lc = *cdesc, ld = *ddesc;
  emu::submit_op(stream, [=]() {
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (uint64_t l = 0; l < k; ++l) {
          const size_t ai =
              ds.transa == CUBLAS_OP_N ? i + l * size_t(la.ld) : l + i * size_t(la.ld);
          const size_t bi =
              ds.transb == CUBLAS_OP_N ? l + j * size_t(lb.ld) : j + l * size_t(lb.ld);
          acc += load(a, la.type, ai) * load(b, lb.type, bi);
        }
        float out = al * acc;
        if (be != 0.0f) out += be * load(c, lc.type, i + j * size_t(lc.ld));
        store(d, ld.type, i + j * size_t(ld.ld), out);
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace nanovllm::cuda_emu
