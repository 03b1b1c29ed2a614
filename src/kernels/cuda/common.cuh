// Device-side helpers shared by the kiln CUDA kernels (nvcc only): float <-> activation type
// conversions (activations are f32, bf16 or f16; arithmetic is always f32) and a block-wide sum.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln::kernels::cuda::detail {

__device__ __forceinline__ float to_float(float v) {
    return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(__half v) {
    return __half2float(v);
}
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread. Uses 33 floats of shared memory; call at most once per kernel between __syncthreads.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[33];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < num_warps ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) warp_sums[32] = v;
    }
    __syncthreads();
    return warp_sums[32];
}

}  // namespace kiln::kernels::cuda::detail
