// rope.h: one thread per (token, head, pair).
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/rope.h"

namespace kiln::kernels::cuda {
namespace {

template <class T>
__global__ void rope_kernel(T* x, int64_t num_tokens, int64_t num_heads, int64_t half, int64_t row_stride,
                            const int32_t* positions, const double* inv_freq) {
    const int64_t total = num_tokens * num_heads * half;
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = idx % half, h = (idx / half) % num_heads, t = idx / (half * num_heads);
        double s, c;
        sincos(double(positions[t]) * inv_freq[i], &s, &c);
        const float fs = float(s), fc = float(c);
        T* v = x + t * row_stride + h * 2 * half + 2 * i;
        const float a = detail::to_float(v[0]), b = detail::to_float(v[1]);
        v[0] = detail::from_float<T>(__fsub_rn(__fmul_rn(a, fc), __fmul_rn(b, fs)));  // no FMA: as the reference
        v[1] = detail::from_float<T>(__fadd_rn(__fmul_rn(a, fs), __fmul_rn(b, fc)));
    }
}

template <class T>
core::Status launch(T* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                    const int32_t* positions, const double* inv_freq, cudaStream_t stream) {
    if (num_tokens < 0 || num_heads <= 0 || head_dim <= 0 || head_dim % 2 || row_stride < num_heads * head_dim)
        return core::error(core::StatusCode::kInvalidArgument)
               << "rope: tokens " << num_tokens << ", heads " << num_heads << ", head_dim " << head_dim << ", stride "
               << row_stride;
    if (num_tokens == 0) return core::Status::ok();
    if (!x || !positions || !inv_freq) return core::error(core::StatusCode::kInvalidArgument) << "rope: null pointer";
    const int64_t total = num_tokens * num_heads * (head_dim / 2);
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
    rope_kernel<T><<<unsigned(blocks), threads, 0, stream>>>(x, num_tokens, num_heads, head_dim / 2, row_stride,
                                                             positions, inv_freq);
    return launch_status("rope_kernel");
}

}  // namespace

core::Status rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                  const int32_t* positions, const double* inv_freq, cudaStream_t stream) {
    return launch(x, num_tokens, num_heads, head_dim, row_stride, positions, inv_freq, stream);
}

core::Status rope(__nv_bfloat16* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t row_stride,
                  const int32_t* positions, const double* inv_freq, cudaStream_t stream) {
    return launch(x, num_tokens, num_heads, head_dim, row_stride, positions, inv_freq, stream);
}

}  // namespace kiln::kernels::cuda
