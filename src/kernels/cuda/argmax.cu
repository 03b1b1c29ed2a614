// argmax.h: one block of 256 threads per row; each thread keeps its best (value, id) over a strided
// walk, then a shared-memory tree picks the best of the block, ties to the lower id.
#include <cmath>

#include "kernels/cuda/argmax.h"
#include "kernels/cuda/cuda_status.h"

namespace kiln::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// (v, i) beats (bv, bi): a larger value, or an equal one at a lower id; NaN never wins and
// bi < 0 means "none yet".
__device__ __forceinline__ bool better(float v, int32_t i, float bv, int32_t bi) {
    if (i < 0 || isnan(v)) return false;
    if (bi < 0) return true;
    return v > bv || (v == bv && i < bi);
}

__global__ void argmax_kernel(const float* logits, int64_t n, int32_t* ids) {
    const float* row = logits + int64_t(blockIdx.x) * n;  // [n]
    float bv = 0.0f;
    int32_t bi = -1;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
        if (better(row[i], int32_t(i), bv, bi)) {
            bv = row[i];
            bi = int32_t(i);
        }
    __shared__ float sv[kThreads];
    __shared__ int32_t si[kThreads];
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && better(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + s];
            si[threadIdx.x] = si[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) ids[blockIdx.x] = si[0] < 0 ? 0 : si[0];
}

}  // namespace

core::Status argmax_rows(const float* logits, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream) {
    if (rows < 0 || rows > int64_t(0x7fffffff) || n <= 0 || n > int64_t(0x7fffffff))
        return core::error(core::StatusCode::kInvalidArgument) << "argmax_rows: rows " << rows << ", n " << n;
    if (rows == 0) return core::Status::ok();
    if (!logits || !ids) return core::error(core::StatusCode::kInvalidArgument) << "argmax_rows: null pointer";
    argmax_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, n, ids);
    return launch_status("argmax_kernel");
}

}  // namespace kiln::kernels::cuda
