// Block decoders for the CUDA kernels (nvcc only), GGML's and kiln's FP4 / FP8 blocks: each
// format's kBytes per block of kElems elements (32; 256 for the K-quants, IQ4_XS and TQ, 16 for NVFP4) and
// decode_group(row, g, v), the 32 values of group g (elements 32g .. 32g+31) of a row of whole
// blocks in f32, exactly as kernels/ref dequantize_row computes them (same operations in the same
// order, no FMA contraction). Used by gemv_quant.cu (decode-sized GEMV, dequantize_blocks) and
// gemm_quant.cu (tensor-core GEMM); with_decoder picks one at run time.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::kernels::cuda::blocks {

// The block types with a decoder here (host and device): GGUF's and kiln's FP4 / FP8 blocks.
__host__ __device__ constexpr bool decodes(core::DType t) {
    using core::DType;
    return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 ||
           t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K ||
           t == DType::kMxfp4 || t == DType::kNvfp4 || t == DType::kE4m3B32 || t == DType::kMxfp8 ||
           t == DType::kIq4Nl || t == DType::kIq4Xs || t == DType::kTq1_0 || t == DType::kTq2_0;
}

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

// Q5_0 (22 bytes: d, qh[4], qs[16]) and Q5_1 (24: d, m, qh[4], qs[16]): q = the nibble of Q4_0's
// layout with bit 4 of element j at bit j of the little-endian qh; Q5_0 x = (q - 16) d, Q5_1
// x = q d + m (no FMA).
template <bool kMin>
struct Q5 {
    static constexpr int kBytes = kMin ? 24 : 22, kElems = 32;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* blk = row + g * kBytes;
        const float d = half_at(blk);
        const float mn = kMin ? half_at(blk + 2) : 0.0f;
        const uint8_t* h = blk + (kMin ? 4 : 2);
        const uint32_t qh = uint32_t(h[0]) | uint32_t(h[1]) << 8 | uint32_t(h[2]) << 16 | uint32_t(h[3]) << 24;
        const uint8_t* qs = h + 4;
        for (int j = 0; j < 16; ++j) {
            const int q0 = (qs[j] & 0x0f) | int((qh >> j) & 1) << 4, q1 = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
            if (kMin) {
                v[j] = __fadd_rn(__fmul_rn(float(q0), d), mn);
                v[j + 16] = __fadd_rn(__fmul_rn(float(q1), d), mn);
            } else {
                v[j] = float(q0 - 16) * d;
                v[j + 16] = float(q1 - 16) * d;
            }
        }
    }
};
using Q5_0 = Q5<false>;
using Q5_1 = Q5<true>;

// Q2_K (84 bytes: scales[16], qs[64], d, dmin) and Q3_K (110: hmask[32], qs[64], scales[12], d):
// group g = 4 half + s of a super-block is 2-bit plane s of the half's 32 qs bytes, elements 0-15
// and 16-31 being sub-blocks 8 half + 2 s and + 1. Q2_K x = (d * (sc & 15)) q - dmin * (sc >> 4);
// Q3_K x = (d * scale) (q - (the hmask bit 4 half + s ? 0 : 4)), scale 6 bits signed (- 32).
struct Q2_K {
    static constexpr int kBytes = 84, kElems = 256;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + (g / 8) * kBytes;
        const int half = int(g % 8) / 4, s = int(g % 4);
        const uint8_t* q = b + 16 + 32 * half;
        const float d = half_at(b + 80), dmin = half_at(b + 82);
        for (int part = 0; part < 2; ++part) {
            const uint8_t sc = b[8 * half + 2 * s + part];
            const float dl = __fmul_rn(d, float(sc & 0x0f)), ml = __fmul_rn(dmin, float(sc >> 4));
            for (int l = 0; l < 16; ++l)
                v[16 * part + l] = __fsub_rn(__fmul_rn(dl, float((q[16 * part + l] >> (2 * s)) & 3)), ml);
        }
    }
};

struct Q3_K {
    static constexpr int kBytes = 110, kElems = 256;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + (g / 8) * kBytes;
        const int half = int(g % 8) / 4, s = int(g % 4);
        const uint8_t* hmask = b;
        const uint8_t* q = b + 32 + 32 * half;
        const uint8_t* scales = b + 96;
        const float d = half_at(b + 108);
        const uint8_t hbit = uint8_t(1u << (4 * half + s));
        for (int part = 0; part < 2; ++part) {
            const int i = 8 * half + 2 * s + part;
            const int sc =
                (((scales[i % 8] >> (4 * (i / 8))) & 0x0f) | ((scales[8 + i % 4] >> (2 * (i / 4))) & 3) << 4) - 32;
            const float dl = __fmul_rn(d, float(sc));
            for (int l = 16 * part; l < 16 * part + 16; ++l) {
                const int low = (q[l] >> (2 * s)) & 3;
                v[l] = __fmul_rn(dl, float(low - ((hmask[l] & hbit) ? 0 : 4)));
            }
        }
    }
};

// kiln's FP4 / FP8 blocks (core/dtype.h, kernels/ref/dequant.cc): E2M1 and E4M3 elements times an
// E8M0 (2^(e - 127); 0xFF NaN), fp16 or fp32 scale, each x one f32 product as in the reference.
__device__ __forceinline__ float e8m0(uint8_t e) {
    return e == 0xff ? __int_as_float(0x7fc00000) : __int_as_float(e == 0 ? 0x00400000 : int(e) << 23);
}
__device__ __forceinline__ float e2m1(int code) {  // sign bit 3, exponent bits 2..1, mantissa bit 0
    constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = kMag[code & 7];
    return code & 8 ? -m : m;
}
__device__ __forceinline__ float e4m3(uint8_t v) {  // OCP FN: 0x7F / 0xFF NaN, no infinities
    const int exp = (v >> 3) & 0xf, man = v & 7;
    if (exp == 0xf && man == 7) return __int_as_float(0x7fc00000);
    const float r = exp == 0 ? ldexpf(float(man), -9) : ldexpf(1.0f + float(man) / 8.0f, exp - 7);
    return v & 0x80 ? -r : r;
}

// MXFP4 (17 bytes: e, qs[16]; element j low nibble of qs[j], j + 16 high).
struct Mxfp4 {
    static constexpr int kBytes = 17, kElems = 32;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + g * kBytes;
        const float d = e8m0(b[0]);
        for (int j = 0; j < 16; ++j) {
            v[j] = e2m1(b[1 + j] & 0x0f) * d;
            v[j + 16] = e2m1(b[1 + j] >> 4) * d;
        }
    }
};

// NVFP4 (10 bytes per 16 elements: fp16 d, qs[8]; element j low nibble of qs[j], j + 8 high): a
// group of 32 is two blocks.
struct Nvfp4 {
    static constexpr int kBytes = 10, kElems = 16;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        for (int half = 0; half < 2; ++half) {
            const uint8_t* b = row + (2 * g + half) * kBytes;
            const float d = half_at(b);
            for (int j = 0; j < 8; ++j) {
                v[16 * half + j] = e2m1(b[2 + j] & 0x0f) * d;
                v[16 * half + j + 8] = e2m1(b[2 + j] >> 4) * d;
            }
        }
    }
};

// The 16 non-linear levels of IQ4_NL / IQ4_XS (ggml kvalues_iq4nl; kernels/block_layouts.h).
__device__ __forceinline__ float iq4_level(int code) {
    constexpr signed char kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    return float(kLevels[code]);
}

// IQ4_NL (18 bytes: fp16 d, qs[16] as Q4_0's): x = d * level.
struct Iq4Nl {
    static constexpr int kBytes = 18, kElems = 32;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + g * kBytes;
        const float d = half_at(b);
        for (int j = 0; j < 16; ++j) {
            v[j] = __fmul_rn(d, iq4_level(b[2 + j] & 0x0f));
            v[j + 16] = __fmul_rn(d, iq4_level(b[2 + j] >> 4));
        }
    }
};

// IQ4_XS (136 bytes per 256: fp16 d, u16 scales_h, scales_l[4], qs[128]); group g of a super-block
// = sub-block s = g % 8 with ls = (scales_l[s / 2] >> 4 (s % 2)) & 15 | ((scales_h >> 2s) & 3) << 4:
// x = (d * (ls - 32)) * level, nibbles qs[16s ..] as Q4_0's.
struct Iq4Xs {
    static constexpr int kBytes = 136, kElems = 256;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + (g / 8) * kBytes;
        const int s = int(g % 8);
        const int sh = int(b[2]) | int(b[3]) << 8;
        const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | (((sh >> (2 * s)) & 3) << 4);
        const float dl = __fmul_rn(half_at(b), float(ls - 32));
        const uint8_t* q = b + 8 + 16 * s;
        for (int j = 0; j < 16; ++j) {
            v[j] = __fmul_rn(dl, iq4_level(q[j] & 0x0f));
            v[j + 16] = __fmul_rn(dl, iq4_level(q[j] >> 4));
        }
    }
};

// TQ2_0 (66 bytes per 256: qs[64], fp16 d): element 128c + 32s + j is bits 2s, 2s+1 of qs[32c + j],
// x = d * (code - 1). TQ1_0 (54 bytes: qs[48], qh[4], fp16 d): five base-3 trits per byte, trit m of
// byte q = ((q * 3^m mod 256) * 3) >> 8; element 32m + j of qs[j], 160 + 16m + j of qs[32 + j], 240 +
// 4m + j of qh[j]; x = d * (trit - 1).
template <bool kBase3>
struct Tq {
    static constexpr int kBytes = kBase3 ? 54 : 66, kElems = 256;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + (g / 8) * kBytes;
        const int k = int(g % 8);
        const float d = half_at(b + (kBase3 ? 52 : 64));
        for (int j = 0; j < 32; ++j) {
            int t;
            if (kBase3) {
                const int e = 32 * k + j;
                const int byte = e < 160 ? e % 32 : e < 240 ? 32 + (e - 160) % 16 : 48 + (e - 240) % 4;
                const int m = e < 160 ? e / 32 : e < 240 ? (e - 160) / 16 : (e - 240) / 4;
                constexpr int kPow3[5] = {1, 3, 9, 27, 81};
                t = ((int((b[byte] * kPow3[m]) & 0xFF) * 3) >> 8) - 1;
            } else {
                t = ((b[32 * (k / 4) + j] >> (2 * (k % 4))) & 3) - 1;
            }
            v[j] = __fmul_rn(d, float(t));
        }
    }
};
using Tq1_0 = Tq<true>;
using Tq2_0 = Tq<false>;

// E4M3_B32 (36 bytes: fp32 d, qs[32]) and MXFP8 (33 bytes: e, qs[32]).
template <bool kMx>
struct Fp8Block {
    static constexpr int kBytes = kMx ? 33 : 36, kElems = 32;
    __device__ static void decode_group(const uint8_t* row, int64_t g, float* v) {
        const uint8_t* b = row + g * kBytes;
        const float d = kMx ? e8m0(b[0])
                            : __int_as_float(int(uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 |
                                                 uint32_t(b[3]) << 24));
        const uint8_t* q = b + (kMx ? 1 : 4);
        for (int j = 0; j < 32; ++j) v[j] = e4m3(q[j]) * d;
    }
};
using E4m3B32 = Fp8Block<false>;
using Mxfp8 = Fp8Block<true>;

// Calls f(B{}) with the decoder of `type` and returns its Status; kUnsupported for a type without
// one, kInvalidArgument when k is not a whole number of the type's blocks. Host code.
template <class F>
core::Status with_decoder(core::DType type, int64_t k, const char* what, F&& f) {
    using core::DType;
    const bool super = type == DType::kQ2_K || type == DType::kQ3_K || type == DType::kQ4_K || type == DType::kQ5_K ||
                       type == DType::kQ6_K || type == DType::kIq4Xs || type == DType::kTq1_0 ||
                       type == DType::kTq2_0;
    if (decodes(type) && k % (super ? 256 : 32) != 0)
        return core::error(core::StatusCode::kInvalidArgument)
               << what << ": " << k << " elements per row are not whole " << core::dtype_name(type) << " blocks";
    switch (type) {
        case DType::kQ8_0:
            return f(Q8_0{});
        case DType::kQ4_0:
            return f(Q4_0{});
        case DType::kQ4_1:
            return f(Q4_1{});
        case DType::kQ5_0:
            return f(Q5_0{});
        case DType::kQ5_1:
            return f(Q5_1{});
        case DType::kQ2_K:
            return f(Q2_K{});
        case DType::kQ3_K:
            return f(Q3_K{});
        case DType::kQ4_K:
            return f(Q4_K{});
        case DType::kQ5_K:
            return f(Q5_K{});
        case DType::kQ6_K:
            return f(Q6_K{});
        case DType::kMxfp4:
            return f(Mxfp4{});
        case DType::kNvfp4:
            return f(Nvfp4{});
        case DType::kE4m3B32:
            return f(E4m3B32{});
        case DType::kMxfp8:
            return f(Mxfp8{});
        case DType::kIq4Nl:
            return f(Iq4Nl{});
        case DType::kIq4Xs:
            return f(Iq4Xs{});
        case DType::kTq1_0:
            return f(Tq1_0{});
        case DType::kTq2_0:
            return f(Tq2_0{});
        default:
            return core::error(core::StatusCode::kUnsupported)
                   << what << ": weight type " << core::dtype_name(type)
                   << " (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k - q6_k, iq4_nl, iq4_xs, tq1_0, tq2_0, mxfp4, nvfp4, e4m3_b32 and mxfp8 are built)";
    }
}

}  // namespace kiln::kernels::cuda::blocks
