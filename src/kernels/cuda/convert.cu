// convert.h: grid-stride loops, one element per thread step.
#include <algorithm>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"

namespace kiln::kernels::cuda {
namespace {

__device__ __forceinline__ void store(__nv_bfloat16* p, float v) {
    *p = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store(__half* p, float v) {
    *p = __float2half_rn(v);
}

template <class T, bool kSaturate = false>
__global__ void convert_kernel(const float* x, T* y, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float v = x[i];
        if (kSaturate && !isnan(v)) v = fminf(fmaxf(v, -65504.0f), 65504.0f);  // half's largest finite
        store(y + i, v);
    }
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t total, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
        y[i] += bias[i % n];
}

__global__ void gather_kernel(const float* src, int64_t n, const int32_t* row_ids, float* dst) {
    const float* s = src + int64_t(row_ids[blockIdx.x]) * n;  // [n]
    float* d = dst + int64_t(blockIdx.x) * n;                 // [n]
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

unsigned grid_for(int64_t n) {
    return unsigned(std::min<int64_t>((n + 255) / 256, 65535));
}

template <class T, bool kSaturate = false>
core::Status launch_convert(const float* x, T* y, int64_t n, cudaStream_t stream) {
    if (n < 0) return core::error(core::StatusCode::kInvalidArgument) << "convert: n " << n;
    if (n == 0) return core::Status::ok();
    if (!x || !y) return core::error(core::StatusCode::kInvalidArgument) << "convert: null pointer";
    convert_kernel<T, kSaturate><<<grid_for(n), 256, 0, stream>>>(x, y, n);
    return launch_status("convert_kernel");
}

}  // namespace

core::Status convert(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
    return launch_convert(x, y, n, stream);
}

core::Status convert(const float* x, __half* y, int64_t n, cudaStream_t stream) {
    return launch_convert(x, y, n, stream);
}

core::Status convert_saturating(const float* x, __half* y, int64_t n, cudaStream_t stream) {
    return launch_convert<__half, true>(x, y, n, stream);
}

core::Status add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream) {
    if (rows < 0 || n <= 0)
        return core::error(core::StatusCode::kInvalidArgument) << "add_bias_rows: rows " << rows << ", n " << n;
    if (rows == 0) return core::Status::ok();
    if (!y || !bias) return core::error(core::StatusCode::kInvalidArgument) << "add_bias_rows: null pointer";
    add_bias_kernel<<<grid_for(rows * n), 256, 0, stream>>>(y, bias, rows * n, n);
    return launch_status("add_bias_kernel");
}

core::Status gather_rows(const float* src, int64_t n, const int32_t* row_ids, int64_t num_rows, float* dst,
                         cudaStream_t stream) {
    if (n <= 0 || num_rows < 0 || num_rows > int64_t(0x7fffffff))
        return core::error(core::StatusCode::kInvalidArgument) << "gather_rows: n " << n << ", rows " << num_rows;
    if (num_rows == 0) return core::Status::ok();
    if (!src || !row_ids || !dst) return core::error(core::StatusCode::kInvalidArgument) << "gather_rows: null pointer";
    gather_kernel<<<unsigned(num_rows), 256, 0, stream>>>(src, n, row_ids, dst);
    return launch_status("gather_kernel");
}

}  // namespace kiln::kernels::cuda
