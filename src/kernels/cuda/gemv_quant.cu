// gemv_quant.h: one warp per weight row; lane l takes blocks l, l + 32, ...; per block the 32
// weights are decoded into registers once and multiplied with every token's 32 activations.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gemv_quant.h"

namespace kiln::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// Each format: kBytes per block of kElems (32, or 256 for the K-quants) and decode_group(row, g, v):
// the 32 values of group g (elements 32g .. 32g+31) of a row of whole blocks, as kernels/ref
// dequantize_row computes them (same operations in the same order, no FMA contraction).
template <class B>
__device__ __forceinline__ void decode_small(const uint8_t* row, int64_t g, float* v) {
    B::decode(row + g * B::kBytes, v);
}

struct Q8_0 {
    static constexpr int kBytes = 34, kElems = 32;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) { decode_small<Q8_0>(row, g, v); }
    __device__ static void decode(const uint8_t* blk, float* v) {  // v[32]
        const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
        for (int i = 0; i < 32; ++i) v[i] = d * float(int8_t(blk[2 + i]));
    }
};

struct Q4_0 {
    static constexpr int kBytes = 18, kElems = 32;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) { decode_small<Q4_0>(row, g, v); }
    __device__ static void decode(const uint8_t* blk, float* v) {
        const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
        for (int i = 0; i < 16; ++i) {
            const uint8_t q = blk[2 + i];
            v[i] = d * float(int(q & 15) - 8);
            v[i + 16] = d * float(int(q >> 4) - 8);
        }
    }
};

struct Q4_1 {
    static constexpr int kBytes = 20, kElems = 32;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) { decode_small<Q4_1>(row, g, v); }
    __device__ static void decode(const uint8_t* blk, float* v) {
        const float d = __half2float(__ushort_as_half(uint16_t(blk[0] | (blk[1] << 8))));
        const float mn = __half2float(__ushort_as_half(uint16_t(blk[2] | (blk[3] << 8))));
        for (int i = 0; i < 16; ++i) {
            const uint8_t q = blk[4 + i];
            v[i] = __fadd_rn(__fmul_rn(float(q & 15), d), mn);  // q * d + m, no FMA: the reference's rounding
            v[i + 16] = __fadd_rn(__fmul_rn(float(q >> 4), d), mn);
        }
    }
};

__device__ __forceinline__ float half_at(const uint8_t* p) {
    return __half2float(__ushort_as_half(uint16_t(p[0] | (p[1] << 8))));
}

// Q4_K / Q5_K super-block b's sub-block j: its scale d * sc and offset dmin * m (the 6-bit sc, m
// unpacked from the 12 bytes at b + 4 as kernels/ref k4_scale_min does), each one f32 product.
__device__ __forceinline__ void k4_scale_offset(const uint8_t* b, int j, float* dl, float* ml) {
    const uint8_t* q = b + 4;
    int sc, m;
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    *dl = __fmul_rn(half_at(b), float(sc));
    *ml = __fmul_rn(half_at(b + 2), float(m));
}

// Q4_K (144 bytes: d, dmin, scales[12], qs[128]) and Q5_K (176: d, dmin, scales[12], qh[32],
// qs[128]): sub-block j = 2 pair + nib holds the low (nib 0) or high nibbles of qs[32 pair ..];
// Q5_K's element l has bit 4 at bit j of qh[l]. x = (d * sc) * q - dmin * m, no FMA.
template <bool kFifthBit>
struct QK4 {
    static constexpr int kBytes = kFifthBit ? 176 : 144, kElems = 256;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + (g / 8) * kBytes;
        const int j = int(g % 8), pair = j / 2, nib = j % 2;
        float dl, ml;
        k4_scale_offset(b, j, &dl, &ml);
        const uint8_t* qh = b + 16;
        const uint8_t* q = b + (kFifthBit ? 48 : 16) + 32 * pair;
        for (int l = 0; l < 32; ++l) {
            int x = (q[l] >> (4 * nib)) & 0x0f;
            if (kFifthBit) x |= ((qh[l] >> j) & 1) << 4;
            v[l] = __fsub_rn(__fmul_rn(dl, float(x)), ml);
        }
    }
};
using Q4_K = QK4<false>;
using Q5_K = QK4<true>;

// Q6_K: ql[128], qh[64], scales[16] (int8), d (f16); group g of a super-block = half g / 4, s = g % 4:
// x = (d * scales[2s + l / 16]) * (q - 32).
struct Q6_K {
    static constexpr int kBytes = 210, kElems = 256;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + (g / 8) * kBytes;
        const int grp = int(g % 8), half = grp / 4, s = grp % 4;
        const uint8_t* ql = b + 64 * half;
        const uint8_t* qh = b + 128 + 32 * half;
        const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half;
        const float d = half_at(b + 208);
        for (int l = 0; l < 32; ++l) {
            const int low = (ql[l + 32 * (s & 1)] >> (4 * (s >> 1))) & 0x0f;
            const int high = (qh[l] >> (2 * s)) & 3;
            v[l] = __fmul_rn(__fmul_rn(d, float(sc[2 * s + l / 16])), float((low | high << 4) - 32));
        }
    }
};

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
    switch (type) {
        case core::DType::kQ8_0:
            return launch<Q8_0>(w, n, k, x, m, y, stream);
        case core::DType::kQ4_0:
            return launch<Q4_0>(w, n, k, x, m, y, stream);
        case core::DType::kQ4_1:
            return launch<Q4_1>(w, n, k, x, m, y, stream);
        case core::DType::kQ4_K:
        case core::DType::kQ5_K:
        case core::DType::kQ6_K:
            if (k % 256 != 0)
                return core::error(core::StatusCode::kInvalidArgument) << "gemv_blocks: k " << k << " for a K-quant";
            return type == core::DType::kQ4_K   ? launch<Q4_K>(w, n, k, x, m, y, stream)
                   : type == core::DType::kQ5_K ? launch<Q5_K>(w, n, k, x, m, y, stream)
                                                : launch<Q6_K>(w, n, k, x, m, y, stream);
        default:
            return core::error(core::StatusCode::kUnsupported) << "gemv_blocks: weight type " << core::dtype_name(type)
                                                               << " (q8_0, q4_0, q4_1, q4_k, q5_k and q6_k are built)";
    }
}

bool gemv_blocks_supports(core::DType type) {
    using core::DType;
    return type == DType::kQ8_0 || type == DType::kQ4_0 || type == DType::kQ4_1 || type == DType::kQ4_K ||
           type == DType::kQ5_K || type == DType::kQ6_K;
}

core::Status dequantize_blocks(core::DType type, const void* w, int64_t num_elements, float* out, cudaStream_t stream) {
    if (num_elements < 0 || num_elements % 32 != 0)
        return core::error(core::StatusCode::kInvalidArgument) << "dequantize_blocks: " << num_elements << " elements";
    if (num_elements == 0) return core::Status::ok();
    if (!w || !out) return core::error(core::StatusCode::kInvalidArgument) << "dequantize_blocks: null pointer";
    const int64_t nb = num_elements / 32;
    const unsigned blocks = unsigned(std::min<int64_t>((nb + 255) / 256, 65535));
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    switch (type) {
        case core::DType::kQ8_0:
            dequant_kernel<Q8_0><<<blocks, 256, 0, stream>>>(wb, nb, out);
            break;
        case core::DType::kQ4_0:
            dequant_kernel<Q4_0><<<blocks, 256, 0, stream>>>(wb, nb, out);
            break;
        case core::DType::kQ4_1:
            dequant_kernel<Q4_1><<<blocks, 256, 0, stream>>>(wb, nb, out);
            break;
        case core::DType::kQ4_K:
        case core::DType::kQ5_K:
        case core::DType::kQ6_K:
            if (num_elements % 256 != 0)
                return core::error(core::StatusCode::kInvalidArgument)
                       << "dequantize_blocks: " << num_elements << " elements of a K-quant";
            if (type == core::DType::kQ4_K) dequant_kernel<Q4_K><<<blocks, 256, 0, stream>>>(wb, nb, out);
            if (type == core::DType::kQ5_K) dequant_kernel<Q5_K><<<blocks, 256, 0, stream>>>(wb, nb, out);
            if (type == core::DType::kQ6_K) dequant_kernel<Q6_K><<<blocks, 256, 0, stream>>>(wb, nb, out);
            break;
        default:
            return core::error(core::StatusCode::kUnsupported)
                   << "dequantize_blocks: weight type " << core::dtype_name(type)
                   << " (q8_0, q4_0, q4_1, q4_k, q5_k and q6_k are built)";
    }
    return launch_status("dequant_kernel");
}

}  // namespace kiln::kernels::cuda
