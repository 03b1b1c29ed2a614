// GGML block decoders for the CUDA kernels (nvcc only): each format's kBytes per block of kElems
// elements (32, or 256 for the K-quants) and decode_group(row, g, v), the 32 values of group g
// (elements 32g .. 32g+31) of a row of whole blocks in f32, exactly as kernels/ref dequantize_row
// computes them (same operations in the same order, no FMA contraction). Used by gemv_quant.cu
// (decode-sized GEMV, dequantize_blocks) and gemm_quant.cu (tensor-core GEMM).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace kiln::kernels::cuda::blocks {

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

}  // namespace kiln::kernels::cuda::blocks
