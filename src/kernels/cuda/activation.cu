// activation.h: SwiGLU over [gate | up] rows, one thread per output element.
#include <algorithm>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kiln::kernels::cuda {
namespace {

template <class T, class Y>
__global__ void silu_mul_rows_kernel(const T* gate_up, Y* act, int64_t total, int64_t F) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / F, j = i % F;
        const float g = detail::to_float(gate_up[r * 2 * F + j]), u = detail::to_float(gate_up[r * 2 * F + F + j]);
        act[i] = detail::from_float<Y>(g / (1.0f + expf(-g)) * u);
    }
}

template <class T, class Y>
core::Status launch(const T* gate_up, Y* act, int64_t rows, int64_t F, cudaStream_t stream) {
    if (rows < 0 || F <= 0)
        return core::error(core::StatusCode::kInvalidArgument) << "silu_mul_rows: rows " << rows << ", F " << F;
    if (rows == 0) return core::Status::ok();
    if (!gate_up || !act) return core::error(core::StatusCode::kInvalidArgument) << "silu_mul_rows: null pointer";
    const int64_t total = rows * F;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
    silu_mul_rows_kernel<T, Y><<<unsigned(blocks), threads, 0, stream>>>(gate_up, act, total, F);
    return launch_status("silu_mul_rows_kernel");
}

}  // namespace

core::Status silu_mul_rows(const float* gate_up, float* act, int64_t rows, int64_t F, cudaStream_t stream) {
    return launch(gate_up, act, rows, F, stream);
}

core::Status silu_mul_rows(const __nv_bfloat16* gate_up, __nv_bfloat16* act, int64_t rows, int64_t F,
                           cudaStream_t stream) {
    return launch(gate_up, act, rows, F, stream);
}

core::Status silu_mul_rows(const float* gate_up, __nv_bfloat16* act, int64_t rows, int64_t F, cudaStream_t stream) {
    return launch(gate_up, act, rows, F, stream);
}

core::Status silu_mul_rows(const float* gate_up, __half* act, int64_t rows, int64_t F, cudaStream_t stream) {
    return launch(gate_up, act, rows, F, stream);
}

}  // namespace kiln::kernels::cuda
