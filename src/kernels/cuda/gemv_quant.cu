// gemv_quant.h: one warp per weight row; lane l takes blocks l, l + 32, ...; per block the 32
// weights are decoded into registers once and multiplied with every token's 32 activations.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/block_decode.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemv_quant.h"

namespace kiln::kernels::cuda {
namespace {

using namespace blocks;

constexpr int kWarpsPerBlock = 4;

// One thread per 32-element group: its values in f32, as kernels/ref dequantize_row computes them.
template <class B>
__global__ void dequant_kernel(const uint8_t* w, int64_t num_blocks, float* out) {
    for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < num_blocks;
         b += int64_t(gridDim.x) * blockDim.x) {
        float v[32];
        B::decode_group(w, b, v);
        for (int i = 0; i < 32; ++i) out[b * 32 + i] = v[i];
    }
}

template <class B, int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(const uint8_t* w, int64_t n, int64_t k, const float* x, int m, float* y) {  // m <= M tokens
    const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= n) return;
    const int64_t nb = k / 32;  // groups of 32 per row
    const uint8_t* wr = w + row * (k / B::kElems) * B::kBytes;
    float acc[M];
    for (int t = 0; t < M; ++t) acc[t] = 0.0f;
    for (int64_t b = lane; b < nb; b += 32) {
        float v[32];
        B::decode_group(wr, b, v);
#pragma unroll
        for (int t = 0; t < M; ++t) {
            if (t >= m) break;
            const float* xb = x + t * k + b * 32;
            float s = 0.0f;
            for (int i = 0; i < 32; ++i) s += v[i] * __ldg(xb + i);
            acc[t] += s;
        }
    }
#pragma unroll
    for (int t = 0; t < M; ++t) {
        if (t >= m) break;
        float s = acc[t];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[t * n + row] = s;
    }
}

template <class B>
core::Status launch(const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y, cudaStream_t stream) {
    const unsigned blocks = unsigned((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const int mi = int(m);  // accumulators for M >= m tokens; rows t >= m are never touched
    if (m == 1) {
        gemv_kernel<B, 1><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(wb, n, k, x, mi, y);
    } else if (m == 2) {
        gemv_kernel<B, 2><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(wb, n, k, x, mi, y);
    } else if (m <= 4) {
        gemv_kernel<B, 4><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(wb, n, k, x, mi, y);
    } else {
        gemv_kernel<B, 8><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(wb, n, k, x, mi, y);
    }
    return launch_status("gemv_kernel");
}

}  // namespace

core::Status gemv_blocks(core::DType type, const void* w, int64_t n, int64_t k, const float* x, int64_t m, float* y,
                         cudaStream_t stream) {
    if (n <= 0 || k <= 0 || k % 32 != 0 || m < 0 || m > kGemvMaxTokens ||
        (n + kWarpsPerBlock - 1) / kWarpsPerBlock > int64_t(0x7fffffff))
        return core::error(core::StatusCode::kInvalidArgument) << "gemv_blocks: n " << n << ", k " << k << ", m " << m;
    if (m == 0) return core::Status::ok();
    if (!w || !x || !y) return core::error(core::StatusCode::kInvalidArgument) << "gemv_blocks: null pointer";
    return with_decoder(type, k, "gemv_blocks", [&](auto b) { return launch<decltype(b)>(w, n, k, x, m, y, stream); });
}

bool gemv_blocks_supports(core::DType type) {
    return decodes(type);
}

core::Status dequantize_blocks(core::DType type, const void* w, int64_t num_elements, float* out, cudaStream_t stream) {
    if (num_elements < 0 || num_elements % 32 != 0)
        return core::error(core::StatusCode::kInvalidArgument) << "dequantize_blocks: " << num_elements << " elements";
    if (num_elements == 0) return core::Status::ok();
    if (!w || !out) return core::error(core::StatusCode::kInvalidArgument) << "dequantize_blocks: null pointer";
    const int64_t nb = num_elements / 32;
    const unsigned blocks = unsigned(std::min<int64_t>((nb + 255) / 256, 65535));
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    return with_decoder(type, num_elements, "dequantize_blocks", [&](auto b) {
        dequant_kernel<decltype(b)><<<blocks, 256, 0, stream>>>(wb, nb, out);
        return launch_status("dequant_kernel");
    });
}

}  // namespace kiln::kernels::cuda
