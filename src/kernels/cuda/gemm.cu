// gemm.h: cuBLASLt GEMM with per-shape plans.
#include <initializer_list>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemm.h"

namespace kiln::kernels::cuda {

core::Status cublas_status(cublasStatus_t status, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) return core::Status::ok();
    const core::StatusCode code = status == CUBLAS_STATUS_ALLOC_FAILED    ? core::StatusCode::kOutOfMemory
                                  : status == CUBLAS_STATUS_NOT_SUPPORTED ? core::StatusCode::kUnsupported
                                                                          : core::StatusCode::kInternal;
    return core::error(code) << "cuBLAS: " << what << ": " << cublasLtGetStatusName(status) << " ("
                             << cublasLtGetStatusString(status) << ")";
}

#define KILN_CUBLAS_RETURN_IF_ERROR(expr) KILN_RETURN_IF_ERROR(cublas_status((expr), #expr))

namespace {

void destroy(cublasLtMatmulDesc_t op, std::initializer_list<cublasLtMatrixLayout_t> layouts) {
    if (op) (void)cublasLtMatmulDescDestroy(op);
    for (cublasLtMatrixLayout_t l : layouts)
        if (l) (void)cublasLtMatrixLayoutDestroy(l);
}

}  // namespace

core::Result<std::unique_ptr<Gemm>> Gemm::create(size_t workspace_bytes) {
    if (device_count() == 0) return core::error(core::StatusCode::kUnsupported) << "no CUDA device";
    std::unique_ptr<Gemm> g(new Gemm());
    KILN_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&g->handle_));
    KILN_ASSIGN_OR_RETURN(g->workspace_, DeviceBuffer::allocate(workspace_bytes));
    return std::move(g);
}

Gemm::~Gemm() {
    for (auto& [key, p] : plans_) destroy(p.op, {p.w_layout, p.x_layout, p.y_layout});
    if (handle_) (void)cublasLtDestroy(handle_);
}

core::Result<const Gemm::Plan*> Gemm::plan(const Key& key) {
    auto it = plans_.find(key);
    if (it != plans_.end()) return &it->second;
    const auto [m, n, k, in_t, out_t] = key;
    const cudaDataType_t in_type = cudaDataType_t(in_t), out_type = cudaDataType_t(out_t);
    Plan p;
    auto build = [&]() -> core::Status {
        KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
        KILN_CUBLAS_RETURN_IF_ERROR(
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
        KILN_CUBLAS_RETURN_IF_ERROR(
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
        // Column-major views of the row-major buffers: w' [k, n], x' [k, m], y' [n, m].
        KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p.w_layout, in_type, uint64_t(k), uint64_t(n), k));
        KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p.x_layout, in_type, uint64_t(k), uint64_t(m), k));
        KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p.y_layout, out_type, uint64_t(n), uint64_t(m), n));
        cublasLtMatmulPreference_t pref = nullptr;
        KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t ws = workspace_.bytes();
        cublasStatus_t st =
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.w_layout, p.x_layout, p.y_layout, p.y_layout, pref, 1,
                                                &result, &found);
        (void)cublasLtMatmulPreferenceDestroy(pref);
        KILN_RETURN_IF_ERROR(cublas_status(st, "cublasLtMatmulAlgoGetHeuristic"));
        if (found == 0)
            return core::error(core::StatusCode::kUnsupported)
                   << "cuBLASLt has no algorithm for a " << m << "x" << n << "x" << k << " GEMM of these types";
        p.algo = result.algo;
        return core::Status::ok();
    };
    const core::Status st = build();
    if (!st.is_ok()) {
        destroy(p.op, {p.w_layout, p.x_layout, p.y_layout});
        return st;
    }
    return &plans_.emplace(key, p).first->second;
}

core::Status Gemm::run_typed(const void* x, const void* w, void* y, cudaDataType_t in_type, cudaDataType_t out_type,
                             int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
    if (m < 0 || n <= 0 || k <= 0)
        return core::error(core::StatusCode::kInvalidArgument) << "gemm: m " << m << ", n " << n << ", k " << k;
    if (m == 0) return core::Status::ok();
    if (!x || !w || !y) return core::error(core::StatusCode::kInvalidArgument) << "gemm: null pointer";
    KILN_ASSIGN_OR_RETURN(const Plan* p, plan(Key{m, n, k, int(in_type), int(out_type)}));
    const float alpha = 1.0f, beta = 0.0f;
    KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, p->op, &alpha, w, p->w_layout, x, p->x_layout, &beta, y,
                                               p->y_layout, y, p->y_layout, &p->algo, workspace_.data(),
                                               workspace_.bytes(), stream));
    return core::Status::ok();
}

core::Status Gemm::run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t m, int64_t n, int64_t k,
                       cudaStream_t stream) {
    return run_typed(x, w, y, CUDA_R_16BF, CUDA_R_32F, m, n, k, stream);
}

core::Status Gemm::run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t m, int64_t n,
                       int64_t k, cudaStream_t stream) {
    return run_typed(x, w, y, CUDA_R_16BF, CUDA_R_16BF, m, n, k, stream);
}

core::Status Gemm::run(const __half* x, const __half* w, float* y, int64_t m, int64_t n, int64_t k,
                       cudaStream_t stream) {
    return run_typed(x, w, y, CUDA_R_16F, CUDA_R_32F, m, n, k, stream);
}

core::Status Gemm::run(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
    return run_typed(x, w, y, CUDA_R_32F, CUDA_R_32F, m, n, k, stream);
}

}  // namespace kiln::kernels::cuda
