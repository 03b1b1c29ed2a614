// Scalar reference matmul kernels (see quant_matmul.h). One function per weight format computes
// the dot product of one weight row with one activation row; `gemm` loops over rows.
#include "kernels/ref/quant_matmul.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/numeric.h"
#include "kernels/block_layouts.h"
#include "kernels/ref/dequant.h"

namespace kiln::kernels::ref {
namespace {

namespace blk = blocks;

float half_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return core::fp16_to_f32(h);
}

uint32_t u32_at(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The 32 4-bit values of a legacy block, element order.
void nibbles32(const uint8_t* qs, int* q) {
    for (int j = 0; j < 16; ++j) {
        q[j] = qs[j] & 0x0f;
        q[j + 16] = qs[j] >> 4;
    }
}

// 5-bit values: nibbles plus bit 4 of element j from bit j of qh.
void fivebit32(const uint8_t* qs, uint32_t qh, int* q) {
    nibbles32(qs, q);
    for (int j = 0; j < 32; ++j) q[j] |= int((qh >> j) & 1) << 4;
}

int32_t idot32(const int* qw, int offset, const int8_t* qx) {
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) sum += (qw[j] - offset) * int32_t(qx[j]);
    return sum;
}

// Dot of one legacy-format weight block with one ActQ8 block.
template <core::DType kType>
double legacy_block_dot(const uint8_t* b, const ActQ8& x) {
    int q[32];
    float d = 0, m = 0;
    int offset = 0;
    bool has_min = false;
    if constexpr (kType == core::DType::kQ8_0) {
        d = half_at(b + blk::kQ8_0D);
        for (int j = 0; j < 32; ++j) q[j] = int8_t(b[blk::kQ8_0Qs + j]);
    } else if constexpr (kType == core::DType::kQ4_0) {
        d = half_at(b + blk::kQ4_0D);
        nibbles32(b + blk::kQ4_0Qs, q);
        offset = 8;
    } else if constexpr (kType == core::DType::kQ4_1) {
        d = half_at(b + blk::kQ4_1D);
        m = half_at(b + blk::kQ4_1M);
        nibbles32(b + blk::kQ4_1Qs, q);
        has_min = true;
    } else if constexpr (kType == core::DType::kQ5_0) {
        d = half_at(b + blk::kQ5_0D);
        fivebit32(b + blk::kQ5_0Qs, u32_at(b + blk::kQ5_0Qh), q);
        offset = 16;
    } else {
        static_assert(kType == core::DType::kQ5_1);
        d = half_at(b + blk::kQ5_1D);
        m = half_at(b + blk::kQ5_1M);
        fivebit32(b + blk::kQ5_1Qs, u32_at(b + blk::kQ5_1Qh), q);
        has_min = true;
    }
    const int32_t isum = idot32(q, offset, x.q);
    float term = (d * x.d) * float(isum);
    if (has_min) term += m * x.s;
    return double(term);
}

// 2^(e - 127) (e = 0: the subnormal 2^-127; 0xFF: inf, as ggml's E8M0 conversion).
float e8m0_at(const uint8_t* p) {
    const uint32_t bits = *p == 0 ? 0x00400000u : uint32_t(*p) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// E2M1 weights: integer dot of the doubled codes (kE2M1x2) with the ActQ8 values, scaled by
// d_w * (d_x / 2). MXFP4: one block per activation block; NVFP4: two 16-element blocks.
double mxfp4_block_dot(const uint8_t* b, const ActQ8& x) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
        isum += blk::kE2M1x2[b[blk::kMxfp4Qs + j] & 0x0f] * int32_t(x.q[j]);
        isum += blk::kE2M1x2[b[blk::kMxfp4Qs + j] >> 4] * int32_t(x.q[j + 16]);
    }
    return double((e8m0_at(b + blk::kMxfp4E) * (0.5f * x.d)) * float(isum));
}

double nvfp4_pair_dot(const uint8_t* b, const ActQ8& x) {
    double sum = 0;
    for (int h = 0; h < 2; ++h) {
        const uint8_t* bh = b + h * blk::kNvfp4Bytes;
        int32_t isum = 0;
        for (int j = 0; j < 8; ++j) {
            isum += blk::kE2M1x2[bh[blk::kNvfp4Qs + j] & 0x0f] * int32_t(x.q[16 * h + j]);
            isum += blk::kE2M1x2[bh[blk::kNvfp4Qs + j] >> 4] * int32_t(x.q[16 * h + j + 8]);
        }
        sum += double((half_at(bh + blk::kNvfp4D) * (0.5f * x.d)) * float(isum));
    }
    return sum;
}

// IQ4_NL / IQ4_XS: integer dot of the non-linear levels (kIq4Values, exact int8) of one 32-element
// block's nibbles with the ActQ8 values, scaled by d_w * d_x (d_w: the block's d, or for IQ4_XS the
// sub-block's d * (ls - 32)).
double iq4_block_dot(const uint8_t* qs, float dw, const ActQ8& x) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
        isum += blk::kIq4Values[qs[j] & 0x0f] * int32_t(x.q[j]);
        isum += blk::kIq4Values[qs[j] >> 4] * int32_t(x.q[j + 16]);
    }
    return double((dw * x.d) * float(isum));
}

// IQ4_XS sub-block s (0..7) of the super-block at b: its scale d * (ls - 32).
float iq4_xs_scale(const uint8_t* b, int s) {
    uint16_t sh;
    std::memcpy(&sh, b + blk::kIq4XsScalesH, 2);
    const int ls = ((b[blk::kIq4XsScalesL + s / 2] >> (4 * (s % 2))) & 0x0f) | (((sh >> (2 * s)) & 3) << 4);
    return half_at(b + blk::kIq4XsD) * float(ls - 32);
}

// Q4_K/Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (as dequant.cc).
void k4_scale_min(const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K (kFiveBit false) or Q5_K super-block dot with one ActQ8K block:
// (d d_x) sum_j sc_j idot_j - (dmin d_x) sum_j m_j bsum_j.
template <bool kFiveBit>
double k4_block_dot(const uint8_t* b, const ActQ8K& x) {
    const size_t scales_off = kFiveBit ? blk::kQ5_KScales : blk::kQ4_KScales;
    const uint8_t* qs = b + (kFiveBit ? blk::kQ5_KQs : blk::kQ4_KQs);
    const uint8_t* qh = b + blk::kQ5_KQh;
    const float d = half_at(b), dmin = half_at(b + 2);
    int32_t sum_sc = 0, sum_min = 0;
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        k4_scale_min(b + scales_off, j, &sc, &m);
        const uint8_t* q = qs + 32 * (j / 2);
        int32_t isum = 0;
        for (int l = 0; l < 32; ++l) {
            int v = (q[l] >> (4 * (j % 2))) & 0x0f;
            if (kFiveBit) v |= ((qh[l] >> j) & 1) << 4;
            isum += v * int32_t(x.q[32 * j + l]);
        }
        sum_sc += sc * isum;
        sum_min += m * (int32_t(x.bsums[2 * j]) + int32_t(x.bsums[2 * j + 1]));
    }
    return double((d * x.d) * float(sum_sc)) - double((dmin * x.d) * float(sum_min));
}

// Q6_K super-block dot: (d d_x) sum_i sc_i sum_l (q - 32) qx.
double q6_k_block_dot(const uint8_t* b, const ActQ8K& x) {
    const float d = half_at(b + blk::kQ6_KD);
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + blk::kQ6_KScales);
    int32_t total = 0;
    for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b + blk::kQ6_KQl + 64 * half;
        const uint8_t* qh = b + blk::kQ6_KQh + 32 * half;
        for (int s = 0; s < 4; ++s) {
            for (int part = 0; part < 2; ++part) {  // sub-block 8 half + 2 s + part: 16 elements
                int32_t isum = 0;
                for (int l = 16 * part; l < 16 * part + 16; ++l) {
                    const int low = (ql[l + 32 * (s & 1)] >> (4 * (s >> 1))) & 0x0f;
                    const int high = (qh[l] >> (2 * s)) & 3;
                    isum += ((low | high << 4) - 32) * int32_t(x.q[128 * half + 32 * s + l]);
                }
                total += int32_t(scales[8 * half + 2 * s + part]) * isum;
            }
        }
    }
    return double((d * x.d) * float(total));
}

// Q2_K super-block dot: (d d_x) sum_i sc_i idot_i - (dmin d_x) sum_i m_i bsum_i, sub-blocks of 16.
double q2_k_block_dot(const uint8_t* b, const ActQ8K& x) {
    const float d = half_at(b + blk::kQ2_KD), dmin = half_at(b + blk::kQ2_KDmin);
    int32_t sum_sc = 0, sum_min = 0;
    for (int half = 0; half < 2; ++half) {
        const uint8_t* q = b + blk::kQ2_KQs + 32 * half;
        for (int s = 0; s < 4; ++s) {
            for (int part = 0; part < 2; ++part) {
                const int i = 8 * half + 2 * s + part;
                int32_t isum = 0;
                for (int l = 16 * part; l < 16 * part + 16; ++l) {
                    isum += ((q[l] >> (2 * s)) & 3) * int32_t(x.q[128 * half + 32 * s + l]);
                }
                sum_sc += (b[blk::kQ2_KScales + i] & 0x0f) * isum;
                sum_min += (b[blk::kQ2_KScales + i] >> 4) * int32_t(x.bsums[i]);
            }
        }
    }
    return double((d * x.d) * float(sum_sc)) - double((dmin * x.d) * float(sum_min));
}

// Q3_K sub-block scale i (0..15), 6 bits, minus 32 (as dequant.cc).
int q3_k_scale(const uint8_t* scales, int i) {
    const int low = (scales[i % 8] >> (4 * (i / 8))) & 0x0f;
    const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (low | high << 4) - 32;
}

// Q3_K super-block dot: (d d_x) sum_i sc_i sum_l (q - (hbit ? 0 : 4)) qx.
double q3_k_block_dot(const uint8_t* b, const ActQ8K& x) {
    const float d = half_at(b + blk::kQ3_KD);
    const uint8_t* hmask = b + blk::kQ3_KHmask;
    int32_t total = 0;
    for (int half = 0; half < 2; ++half) {
        const uint8_t* q = b + blk::kQ3_KQs + 32 * half;
        for (int s = 0; s < 4; ++s) {
            for (int part = 0; part < 2; ++part) {
                const int i = 8 * half + 2 * s + part;
                int32_t isum = 0;
                for (int l = 16 * part; l < 16 * part + 16; ++l) {
                    const int low = (q[l] >> (2 * s)) & 3;
                    const int v = low - ((hmask[l] >> (4 * half + s)) & 1 ? 0 : 4);
                    isum += v * int32_t(x.q[128 * half + 32 * s + l]);
                }
                total += q3_k_scale(b + blk::kQ3_KScales, i) * isum;
            }
        }
    }
    return double((d * x.d) * float(total));
}

template <core::DType kType>
float quant_row_dot(const uint8_t* w, const uint8_t* act, int64_t k) {
    double sum = 0;
    if constexpr (kType == core::DType::kQ2_K || kType == core::DType::kQ3_K || kType == core::DType::kQ4_K ||
                  kType == core::DType::kQ5_K || kType == core::DType::kQ6_K) {
        const size_t bytes = core::dtype_info(kType).block_bytes;
        for (int64_t i = 0; i < k / blk::kQK_K; ++i) {
            ActQ8K x;
            std::memcpy(&x, act + i * int64_t(sizeof(ActQ8K)), sizeof(ActQ8K));
            const uint8_t* b = w + i * int64_t(bytes);
            if constexpr (kType == core::DType::kQ6_K) {
                sum += q6_k_block_dot(b, x);
            } else if constexpr (kType == core::DType::kQ2_K) {
                sum += q2_k_block_dot(b, x);
            } else if constexpr (kType == core::DType::kQ3_K) {
                sum += q3_k_block_dot(b, x);
            } else {
                sum += k4_block_dot<kType == core::DType::kQ5_K>(b, x);
            }
        }
    } else if constexpr (kType == core::DType::kTq1_0 || kType == core::DType::kTq2_0) {
        // Ternary weights: per 32-element sub-block, the integer dot of t with the ActQ8 values, times
        // d_w * d_x (d_w the super-block's d).
        const int64_t bytes = int64_t(core::dtype_info(kType).block_bytes);
        const size_t d_off = kType == core::DType::kTq1_0 ? blk::kTq1_0D : blk::kTq2_0D;
        for (int64_t sb = 0; sb < k / blk::kQK_K; ++sb) {
            const uint8_t* b = w + sb * bytes;
            int8_t t[blk::kQK_K];
            tq_trits(kType, b, t);
            const float d = half_at(b + d_off);
            for (int64_t i = 0; i < blk::kQK_K / blk::kQK; ++i) {
                ActQ8 x;
                std::memcpy(&x, act + (sb * (blk::kQK_K / blk::kQK) + i) * int64_t(sizeof(ActQ8)), sizeof(ActQ8));
                int32_t isum = 0;
                for (int j = 0; j < blk::kQK; ++j) isum += int32_t(t[blk::kQK * i + j]) * int32_t(x.q[j]);
                sum += double((d * x.d) * float(isum));
            }
        }
    } else if constexpr (kType == core::DType::kIq4Nl || kType == core::DType::kIq4Xs) {
        for (int64_t i = 0; i < k / blk::kQK; ++i) {
            ActQ8 x;
            std::memcpy(&x, act + i * int64_t(sizeof(ActQ8)), sizeof(ActQ8));
            if constexpr (kType == core::DType::kIq4Nl) {
                const uint8_t* b = w + i * int64_t(blk::kIq4NlBytes);
                sum += iq4_block_dot(b + blk::kIq4NlQs, half_at(b + blk::kIq4NlD), x);
            } else {
                const uint8_t* b = w + (i / 8) * int64_t(blk::kIq4XsBytes);
                sum += iq4_block_dot(b + blk::kIq4XsQs + 16 * (i % 8), iq4_xs_scale(b, int(i % 8)), x);
            }
        }
    } else if constexpr (kType == core::DType::kMxfp4 || kType == core::DType::kNvfp4) {
        // bytes per 32 elements: one MXFP4 block or two NVFP4 blocks
        const int64_t bytes = kType == core::DType::kMxfp4 ? int64_t(blk::kMxfp4Bytes) : 2 * int64_t(blk::kNvfp4Bytes);
        for (int64_t i = 0; i < k / blk::kQK; ++i) {
            ActQ8 x;
            std::memcpy(&x, act + i * int64_t(sizeof(ActQ8)), sizeof(ActQ8));
            const uint8_t* b = w + i * bytes;
            sum += kType == core::DType::kMxfp4 ? mxfp4_block_dot(b, x) : nvfp4_pair_dot(b, x);
        }
    } else {
        const size_t bytes = core::dtype_info(kType).block_bytes;
        for (int64_t i = 0; i < k / blk::kQK; ++i) {
            ActQ8 x;
            std::memcpy(&x, act + i * int64_t(sizeof(ActQ8)), sizeof(ActQ8));
            sum += legacy_block_dot<kType>(w + i * int64_t(bytes), x);
        }
    }
    return float(sum);
}

template <core::DType kType>
float float_row_dot(const uint8_t* w, const uint8_t* act, int64_t k) {
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
        float wi, xi;
        if constexpr (kType == core::DType::kBF16) {  // bf16 activations (ActFormat::kBF16)
            uint16_t h;
            std::memcpy(&h, act + 2 * i, 2);
            xi = core::bf16_to_f32(h);
        } else {
            std::memcpy(&xi, act + 4 * i, 4);
        }
        if constexpr (kType == core::DType::kF32) {
            std::memcpy(&wi, w + 4 * i, 4);
        } else {
            uint16_t h;
            std::memcpy(&h, w + 2 * i, 2);
            wi = kType == core::DType::kF16 ? core::fp16_to_f32(h) : core::bf16_to_f32(h);
        }
        sum += double(wi) * double(xi);
    }
    return float(sum);
}

// FP8 weights (E4M3_B32, MXFP8) with f32 activations: per block the exact sum of e4m3(q_j) * x_j in
// double, times the block scale.
template <core::DType kType>
float fp8_row_dot(const uint8_t* w, const uint8_t* act, int64_t k) {
    constexpr bool kMx = kType == core::DType::kMxfp8;
    constexpr int64_t kBytes = kMx ? int64_t(blk::kMxfp8Bytes) : int64_t(blk::kE4m3B32Bytes);
    constexpr int64_t kQs = kMx ? int64_t(blk::kMxfp8Qs) : int64_t(blk::kE4m3B32Qs);
    double sum = 0;
    for (int64_t i = 0; i < k / blk::kQK; ++i) {
        const uint8_t* b = w + i * kBytes;
        float d;
        if constexpr (kMx) {
            d = e8m0_at(b + blk::kMxfp8E);
        } else {
            std::memcpy(&d, b + blk::kE4m3B32D, 4);
        }
        double block = 0;
        for (int j = 0; j < blk::kQK; ++j) {
            float xj;
            std::memcpy(&xj, act + 4 * (i * blk::kQK + j), 4);
            block += double(core::fp8_e4m3_to_f32(b[kQs + j])) * double(xj);
        }
        sum += block * double(d);
    }
    return float(sum);
}

// I8 weights (plain int8 rows) x a kI8Row activation row: the exact integer dot, times d_x.
float i8_row_dot(const uint8_t* w, const uint8_t* act, int64_t k) {
    ActI8Row h;
    std::memcpy(&h, act, sizeof(h));
    const int8_t* q = reinterpret_cast<const int8_t*>(act + sizeof(h));
    int64_t sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += int64_t(int8_t(w[j])) * q[j];
    return h.d * float(sum);
}

template <core::DType kType>
void gemm(const void* w, size_t w_row_bytes, const void* act, size_t act_row_bytes, int64_t n, int64_t k, float* y,
          int64_t ldy, int64_t r0, int64_t r1) {
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* ab = static_cast<const uint8_t*>(act);
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < n; ++t) {
            const uint8_t* wr = wb + r * int64_t(w_row_bytes);
            const uint8_t* ar = ab + t * int64_t(act_row_bytes);
            if constexpr (kType == core::DType::kF32 || kType == core::DType::kF16 || kType == core::DType::kBF16) {
                y[t * ldy + r] = float_row_dot<kType>(wr, ar, k);
            } else if constexpr (kType == core::DType::kE4m3B32 || kType == core::DType::kMxfp8) {
                y[t * ldy + r] = fp8_row_dot<kType>(wr, ar, k);
            } else if constexpr (kType == core::DType::kI8) {
                y[t * ldy + r] = i8_row_dot(wr, ar, k);
            } else {
                y[t * ldy + r] = quant_row_dot<kType>(wr, ar, k);
            }
        }
    }
}

size_t f32_row_bytes(int64_t k) {
    return size_t(k) * sizeof(float);
}
size_t q8_row_bytes(int64_t k) {
    return size_t(k / blk::kQK) * sizeof(ActQ8);
}
size_t q8k_row_bytes(int64_t k) {
    return size_t(k / blk::kQK_K) * sizeof(ActQ8K);
}

void copy_row(const float* x, void* dst, int64_t k) {
    std::memcpy(dst, x, size_t(k) * sizeof(float));
}

size_t bf16_row_bytes(int64_t k) {
    return size_t(k) * sizeof(uint16_t);
}
void quantize_bf16(const float* x, void* dst, int64_t k) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < k; ++i) {
        const uint16_t h = core::f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
    }
}
size_t i8row_row_bytes(int64_t k) {
    return sizeof(ActI8Row) + size_t(i8_row_padded(k));
}
void quantize_q8_void(const float* x, void* dst, int64_t k) {
    // dst may be unaligned: quantize block by block through an aligned temporary.
    for (int64_t i = 0; i < k / blk::kQK; ++i) {
        ActQ8 b;
        quantize_row_q8(x + i * blk::kQK, &b, blk::kQK);
        std::memcpy(static_cast<uint8_t*>(dst) + i * int64_t(sizeof(ActQ8)), &b, sizeof(ActQ8));
    }
}
void quantize_q8k_void(const float* x, void* dst, int64_t k) {
    for (int64_t i = 0; i < k / blk::kQK_K; ++i) {
        ActQ8K b;
        quantize_row_q8k(x + i * blk::kQK_K, &b, blk::kQK_K);
        std::memcpy(static_cast<uint8_t*>(dst) + i * int64_t(sizeof(ActQ8K)), &b, sizeof(ActQ8K));
    }
}

// amax / 127 and its inverse, as ggml quantize_row_q8_0.
void block_scale(const float* x, int len, float* d, float* id) {
    float amax = 0;
    for (int j = 0; j < len; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    *d = amax / 127.0f;
    *id = *d != 0.0f ? 1.0f / *d : 0.0f;
}

int8_t round_q(float v) {
    float r = std::nearbyint(v);  // default rounding mode: half to even, like cvtps2dq
    r = std::fmin(127.0f, std::fmax(-127.0f, r));
    return int8_t(r);
}

constexpr MatmulKernel kF32Kernel{ActFormat::kF32, f32_row_bytes, copy_row, gemm<core::DType::kF32>};
constexpr MatmulKernel kF16Kernel{ActFormat::kF32, f32_row_bytes, copy_row, gemm<core::DType::kF16>};
constexpr MatmulKernel kBF16Kernel{ActFormat::kBF16, bf16_row_bytes, quantize_bf16, gemm<core::DType::kBF16>};
constexpr MatmulKernel kQ4_0Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kQ4_0>};
constexpr MatmulKernel kQ4_1Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kQ4_1>};
constexpr MatmulKernel kQ5_0Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kQ5_0>};
constexpr MatmulKernel kQ5_1Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kQ5_1>};
constexpr MatmulKernel kQ8_0Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kQ8_0>};
constexpr MatmulKernel kMxfp4Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void,
                                         gemm<core::DType::kMxfp4>};
constexpr MatmulKernel kNvfp4Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void,
                                         gemm<core::DType::kNvfp4>};
constexpr MatmulKernel kIq4NlKernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kIq4Nl>};
constexpr MatmulKernel kIq4XsKernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kIq4Xs>};
constexpr MatmulKernel kTq1_0Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kTq1_0>};
constexpr MatmulKernel kTq2_0Kernel{ActFormat::kQ8, q8_row_bytes, quantize_q8_void, gemm<core::DType::kTq2_0>};
constexpr MatmulKernel kE4m3B32Kernel{ActFormat::kF32, f32_row_bytes, copy_row,
                                           gemm<core::DType::kE4m3B32>};
constexpr MatmulKernel kMxfp8Kernel{ActFormat::kF32, f32_row_bytes, copy_row, gemm<core::DType::kMxfp8>};
constexpr MatmulKernel kI8Kernel{ActFormat::kI8Row, i8row_row_bytes, quantize_row_i8row, gemm<core::DType::kI8>};
constexpr MatmulKernel kQ2_KKernel{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k_void,
                                        gemm<core::DType::kQ2_K>};
constexpr MatmulKernel kQ3_KKernel{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k_void,
                                        gemm<core::DType::kQ3_K>};
constexpr MatmulKernel kQ4_KKernel{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k_void,
                                        gemm<core::DType::kQ4_K>};
constexpr MatmulKernel kQ5_KKernel{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k_void,
                                        gemm<core::DType::kQ5_K>};
constexpr MatmulKernel kQ6_KKernel{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k_void,
                                        gemm<core::DType::kQ6_K>};

}  // namespace

void quantize_row_q8(const float* x, ActQ8* dst, int64_t k) {
    KILN_CHECK(k % blk::kQK == 0) << "quantize_row_q8: k=" << k;
    for (int64_t i = 0; i < k / blk::kQK; ++i) {
        const float* xb = x + i * blk::kQK;
        ActQ8& b = dst[i];
        float d, id;
        block_scale(xb, blk::kQK, &d, &id);
        int32_t sum = 0;
        for (int j = 0; j < blk::kQK; ++j) {
            b.q[j] = round_q(xb[j] * id);
            sum += b.q[j];
        }
        b.d = d;
        b.s = d * float(sum);
    }
}

void quantize_row_q8k(const float* x, ActQ8K* dst, int64_t k) {
    KILN_CHECK(k % blk::kQK_K == 0) << "quantize_row_q8k: k=" << k;
    for (int64_t i = 0; i < k / blk::kQK_K; ++i) {
        const float* xb = x + i * blk::kQK_K;
        ActQ8K& b = dst[i];
        float d, id;
        block_scale(xb, blk::kQK_K, &d, &id);
        for (int j = 0; j < blk::kQK_K; ++j) b.q[j] = round_q(xb[j] * id);
        for (int g = 0; g < 16; ++g) {
            int32_t sum = 0;
            for (int j = 0; j < 16; ++j) sum += b.q[16 * g + j];
            b.bsums[g] = int16_t(sum);
        }
        b.d = d;
    }
}

void quantize_row_i8row(const float* x, void* dst, int64_t k) {
    float amax = 0;
    for (int64_t j = 0; j < k; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f == 0 ? 1.0f : amax / 127.0f;  // as quant::quantize_int8_rows
    int8_t* q = reinterpret_cast<int8_t*>(static_cast<uint8_t*>(dst) + sizeof(ActI8Row));
    int32_t sum = 0;
    for (int64_t j = 0; j < k; ++j) {
        q[j] = round_q(x[j] / d);
        sum += q[j];
    }
    for (int64_t j = k; j < i8_row_padded(k); ++j) q[j] = 0;
    const ActI8Row h{d, sum};
    std::memcpy(dst, &h, sizeof(h));
}

const MatmulKernel* ref_matmul_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kF32:
            return &kF32Kernel;
        case core::DType::kF16:
            return &kF16Kernel;
        case core::DType::kBF16:
            return &kBF16Kernel;
        case core::DType::kQ4_0:
            return &kQ4_0Kernel;
        case core::DType::kQ4_1:
            return &kQ4_1Kernel;
        case core::DType::kQ5_0:
            return &kQ5_0Kernel;
        case core::DType::kQ5_1:
            return &kQ5_1Kernel;
        case core::DType::kQ8_0:
            return &kQ8_0Kernel;
        case core::DType::kQ2_K:
            return &kQ2_KKernel;
        case core::DType::kQ3_K:
            return &kQ3_KKernel;
        case core::DType::kQ4_K:
            return &kQ4_KKernel;
        case core::DType::kQ5_K:
            return &kQ5_KKernel;
        case core::DType::kQ6_K:
            return &kQ6_KKernel;
        case core::DType::kMxfp4:
            return &kMxfp4Kernel;
        case core::DType::kNvfp4:
            return &kNvfp4Kernel;
        case core::DType::kIq4Nl:
            return &kIq4NlKernel;
        case core::DType::kIq4Xs:
            return &kIq4XsKernel;
        case core::DType::kTq1_0:
            return &kTq1_0Kernel;
        case core::DType::kTq2_0:
            return &kTq2_0Kernel;
        case core::DType::kE4m3B32:
            return &kE4m3B32Kernel;
        case core::DType::kMxfp8:
            return &kMxfp8Kernel;
        case core::DType::kI8:
            return &kI8Kernel;
        default:
            return nullptr;
    }
}

}  // namespace kiln::kernels::ref
