// Dense GEMM through cuBLASLt, the baseline path for bf16 / fp16 weights (and f32) (issue "CUDA backend"):
// y [m, n] = x [m, k] @ w [n, k]^T, row-major as everywhere in kiln (w as the checkpoint stores a
// Linear's weight), fp32 accumulation, y in f32 or the inputs' type. cuBLASLt is column-major, so
// this runs C' [n, m] = op_T(w' [k, n]) @ x' [k, m] on the same bytes. A Gemm owns its cuBLASLt
// handle and workspace; the algorithm for each (m, n, k, types) is asked of cuBLASLt's heuristic once
// and cached (host-side only: no device synchronization). Callable from plain C++.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/status.h"
#include "kernels/cuda/device.h"

namespace kiln::kernels::cuda {

class Gemm {
public:
    // kUnsupported without a device; workspace_bytes of device memory for cuBLASLt (32 MiB is what
    // Hopper's larger kernels may ask for).
    static core::Result<std::unique_ptr<Gemm>> create(size_t workspace_bytes = size_t(32) << 20);
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    // Device pointers. kInvalidArgument for sizes <= 0 (m = 0 is a no-op) or null pointers;
    // kUnsupported when cuBLASLt offers no algorithm for the shape; cuBLAS errors name the call.
    core::Status run(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t m, int64_t n, int64_t k,
                     cudaStream_t stream = nullptr);
    core::Status run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t m, int64_t n, int64_t k,
                     cudaStream_t stream = nullptr);
    core::Status run(const __half* x, const __half* w, float* y, int64_t m, int64_t n, int64_t k,
                     cudaStream_t stream = nullptr);
    // f32 inputs with f32 arithmetic (CUBLAS_COMPUTE_32F: no TF32), for weights kept in f32 (the
    // dequantized formats): the numerics of the CPU's f32 path, at FP32 rather than tensor-core speed.
    core::Status run(const float* x, const float* w, float* y, int64_t m, int64_t n, int64_t k,
                     cudaStream_t stream = nullptr);

private:
    Gemm() = default;
    core::Status run_typed(const void* x, const void* w, void* y, cudaDataType_t in_type, cudaDataType_t out_type,
                           int64_t m, int64_t n, int64_t k, cudaStream_t stream);

    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, y_layout = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::tuple<int64_t, int64_t, int64_t, int, int>;  // m, n, k, input type, output type
    core::Result<const Plan*> plan(const Key& key);

    cublasLtHandle_t handle_ = nullptr;
    DeviceBuffer workspace_;
    std::map<Key, Plan> plans_;
};

// Status for a cuBLAS(Lt) return code: ok, or `what` with cuBLAS's name for the error.
core::Status cublas_status(cublasStatus_t status, const char* what);

}  // namespace kiln::kernels::cuda
