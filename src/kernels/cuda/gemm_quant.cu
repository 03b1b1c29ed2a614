// gemm_quant.h. Block (blockIdx.x, blockIdx.y) computes y rows [64 by, +64) x columns [128 bx, +128).
// Per 32-wide step of k: the x tile [64][32] by cp.async, and each of the 128 threads decodes one
// weight row's group (f32, then f16) into the w tile [128][32]; then each warp runs 2 x 8
// m16n8k16 tiles twice (k 0-15, 16-31). Shared rows are padded to 40 halves, so the 8 rows of a
// fragment load fall in distinct banks. Fragment layouts: prefill_attention.cu's header comment;
// B[k][n] = W[n][k] is W's row-major tile read as the mma's column-major operand.
#include <algorithm>

#include "kernels/cuda/block_decode.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemm_quant.h"
#include "kernels/cuda/mma.cuh"

namespace kiln::kernels::cuda {
namespace {

using namespace blocks;
using namespace mma;

constexpr int kTileM = 64, kTileN = 128, kTileK = 32, kStride = kTileK + 8, kThreads = 128;

__device__ __forceinline__ uint32_t load32(const __half* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}

template <class B>
__global__ void __launch_bounds__(kThreads) gemm_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int n, int k,
                                                        const __half* __restrict__ x, int m, float* __restrict__ y) {
    __shared__ __align__(16) __half xs[kTileM * kStride];  // [64][40]: x rows of the tile
    __shared__ __align__(16) __half ws[kTileN * kStride];  // [128][40]: weight rows of the tile
    const int m0 = int(blockIdx.y) * kTileM, n0 = int(blockIdx.x) * kTileN;
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 64;  // this warp's 32 x 64 of the tile
    const int wrow = n0 + int(threadIdx.x);                 // the weight row this thread decodes
    const uint8_t* wp = w + int64_t(wrow < n ? wrow : 0) * row_bytes;
    float acc[2][8][4] = {};
    for (int gi = 0; gi < k / kTileK; ++gi) {
        for (int c = int(threadIdx.x); c < kTileM * 4; c += kThreads) {  // 4 chunks of 8 halves per row
            const int r = c >> 2, ch = c & 3;
            __half* dst = xs + r * kStride + ch * 8;
            if (m0 + r < m) {
                cp_async16(dst, x + int64_t(m0 + r) * k + gi * kTileK + ch * 8);
            } else {
                *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
            }
        }
        float v[32];
        if (wrow < n) {
            B::decode_group(wp, gi, v);
        } else {
            for (float& e : v) e = 0.0f;
        }
        uint4* wdst = reinterpret_cast<uint4*>(ws + threadIdx.x * kStride);  // 16-byte stores: no conflicts
#pragma unroll
        for (int i = 0; i < 4; ++i)
            wdst[i] = make_uint4(pack_half2(v[8 * i], v[8 * i + 1]), pack_half2(v[8 * i + 2], v[8 * i + 3]),
                                 pack_half2(v[8 * i + 4], v[8 * i + 5]), pack_half2(v[8 * i + 6], v[8 * i + 7]));
        cp_async_wait_all();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTileK; kk += 16) {
            uint32_t a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const __half* p = xs + (wm + mt * 16 + g) * kStride + kk + 2 * t;
                a[mt][0] = load32(p);
                a[mt][1] = load32(p + 8 * kStride);
                a[mt][2] = load32(p + 8);
                a[mt][3] = load32(p + 8 * kStride + 8);
            }
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const __half* p = ws + (wn + nt * 8 + g) * kStride + kk + 2 * t;
                const uint32_t b0 = load32(p), b1 = load32(p + 8);
                mma_16816(acc[0][nt], a[0], b0, b1);
                mma_16816(acc[1][nt], a[1], b0, b1);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            const int row = m0 + wm + mt * 16 + g, col = n0 + wn + nt * 8 + 2 * t;
            for (int half = 0; half < 2; ++half) {  // rows g and g + 8
                const int r = row + 8 * half;
                if (r >= m) continue;
                float* out = y + int64_t(r) * n;
                if (col < n) out[col] = acc[mt][nt][2 * half];
                if (col + 1 < n) out[col + 1] = acc[mt][nt][2 * half + 1];
            }
        }
}

template <class B>
core::Status launch(const void* w, int64_t n, int64_t k, const __half* x, int64_t m, float* y, cudaStream_t stream) {
    const dim3 grid(unsigned((n + kTileN - 1) / kTileN), unsigned((m + kTileM - 1) / kTileM));
    const int64_t row_bytes = k / B::kElems * B::kBytes;
    gemm_kernel<B>
        <<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(w), row_bytes, int(n), int(k), x, int(m), y);
    return launch_status("gemm_blocks kernel");
}

}  // namespace

core::Status gemm_blocks(core::DType type, const void* w, int64_t n, int64_t k, const __half* x, int64_t m, float* y,
                         cudaStream_t stream) {
    if (n <= 0 || n > int64_t(0x7fffffff) || k <= 0 || k > int64_t(0x7fffffff) || k % 32 != 0 || m < 0 ||
        (m + kTileM - 1) / kTileM > 65535)
        return core::error(core::StatusCode::kInvalidArgument) << "gemm_blocks: n " << n << ", k " << k << ", m " << m;
    if (m == 0) return core::Status::ok();
    if (!w || !x || !y || reinterpret_cast<uintptr_t>(x) % 16 != 0)
        return core::error(core::StatusCode::kInvalidArgument) << "gemm_blocks: null or unaligned pointer";
    return with_decoder(type, k, "gemm_blocks", [&](auto b) { return launch<decltype(b)>(w, n, k, x, m, y, stream); });
}

}  // namespace kiln::kernels::cuda
