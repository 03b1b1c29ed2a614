// norm.h: fused residual add + RMSNorm, one block per row.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/norm.h"

namespace kiln::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

// X: the residual stream's type; Y: the output's (the input type of the GEMM that follows).
template <class T, class Y>
__global__ void add_rmsnorm_kernel(T* x, const T* add, const float* weight, Y* y, int64_t n, float eps) {
    T* xr = x + int64_t(blockIdx.x) * n;  // [n]
    Y* yr = y + int64_t(blockIdx.x) * n;  // [n]
    const T* ar = add ? add + int64_t(blockIdx.x) * n : nullptr;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = to_float(xr[i]);
        if (ar) {
            const T sum = from_float<T>(v + to_float(ar[i]));  // stored as the activation type
            xr[i] = sum;
            v = to_float(sum);
        }
        ss += v * v;
    }
    const float scale = 1.0f / sqrtf(detail::block_sum(ss) / float(n) + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_float<Y>(to_float(xr[i]) * scale * weight[i]);
}

template <class T, class Y>
core::Status launch(T* x, const T* add, const float* weight, Y* y, int64_t rows, int64_t n, float eps,
                    cudaStream_t stream) {
    if (rows < 0 || n <= 0 || rows > int64_t(0x7fffffff) || !(eps >= 0.0f))
        return core::error(core::StatusCode::kInvalidArgument) << "add_rmsnorm: rows " << rows << ", n " << n;
    if (rows == 0) return core::Status::ok();
    if (!x || !weight || !y) return core::error(core::StatusCode::kInvalidArgument) << "add_rmsnorm: null pointer";
    const int threads = n >= 4096 ? 1024 : n >= 1024 ? 512 : 256;
    add_rmsnorm_kernel<T, Y><<<unsigned(rows), threads, 0, stream>>>(x, add, weight, y, n, eps);
    return launch_status("add_rmsnorm_kernel");
}

}  // namespace

core::Status add_rmsnorm(float* x, const float* add, const float* weight, float* y, int64_t rows, int64_t n, float eps,
                         cudaStream_t stream) {
    return launch(x, add, weight, y, rows, n, eps, stream);
}

core::Status add_rmsnorm(__nv_bfloat16* x, const __nv_bfloat16* add, const float* weight, __nv_bfloat16* y,
                         int64_t rows, int64_t n, float eps, cudaStream_t stream) {
    return launch(x, add, weight, y, rows, n, eps, stream);
}

core::Status add_rmsnorm(float* x, const float* add, const float* weight, __nv_bfloat16* y, int64_t rows, int64_t n,
                         float eps, cudaStream_t stream) {
    return launch(x, add, weight, y, rows, n, eps, stream);
}

core::Status add_rmsnorm(float* x, const float* add, const float* weight, __half* y, int64_t rows, int64_t n, float eps,
                         cudaStream_t stream) {
    return launch(x, add, weight, y, rows, n, eps, stream);
}

}  // namespace kiln::kernels::cuda
