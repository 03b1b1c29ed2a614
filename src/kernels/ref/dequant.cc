// Scalar reference dequantizers (see dequant.h). Each block is memcpy'd into a struct mirroring
// ggml-common.h (kiln's own NVFP4 block: core/dtype.h), so source pointers need no alignment.
// "fp16" fields are IEEE half bit patterns. Operation order matches ggml-quants.c dequantize_row_* (e.g. Q4_1 is d * q
// + m, K-quants compute the sub-block scale d * sc first): keep it when editing, the golden test checks bit equality.
#include "kernels/ref/dequant.h"

#include <cstring>

#include "core/numeric.h"
#include "kernels/block_layouts.h"

// Bit-exactness needs `a * b - c` rounded twice, as ggml/gguf-py do: forbid fusing it into an FMA
// (clang contracts within expressions by default when the target has FMA; GCC's ISO-mode default is off).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace kiln::kernels::ref {
namespace {

constexpr int kQK = 32;     // elements per block of the legacy formats (Q4_0 ... Q8_1)
constexpr int kQK_K = 256;  // elements per super-block of the K-quants

// Q4_0: 32 weights, x = d * (q - 8), q a 4-bit unsigned nibble.
// qs[j] low nibble holds element j, high nibble element j + 16.
struct BlockQ4_0 {
    uint16_t d;  // fp16 scale
    uint8_t qs[kQK / 2];
};
// Q4_1: x = d * q + m.
struct BlockQ4_1 {
    uint16_t d;           // fp16 scale
    uint16_t m;           // fp16 min
    uint8_t qs[kQK / 2];  // nibbles as Q4_0
};
// Q5_0: x = d * (q - 16), q 5 bits: low 4 from qs (as Q4_0), bit 4 of element j from bit j of qh.
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];  // little-endian u32 of high bits
    uint8_t qs[kQK / 2];
};
// Q5_1: x = d * q + m, q as Q5_0.
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};
// Q8_0: x = d * q, q signed 8-bit.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[kQK];
};
// Q8_1: as Q8_0 plus s = d * sum(q) (used by dot products, not needed to decode).
struct BlockQ8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[kQK];
};
// Q2_K: 16 sub-blocks of 16. scales[i]: low nibble = scale, high nibble = min of sub-block i.
// x = (d * scale) * q - (dmin * min), q 2 bits. qs is two 128-element halves of 32 bytes; within a
// half, bits (2s, 2s+1) of byte l hold element 32 * s + l.
struct BlockQ2_K {
    uint8_t scales[kQK_K / 16];
    uint8_t qs[kQK_K / 4];
    uint16_t d;     // fp16 super-block scale for scales
    uint16_t dmin;  // fp16 super-block scale for mins
};
// Q3_K: 16 sub-blocks of 16, x = (d * (scale - 32)) * (q - (hbit ? 0 : 4)), q 2 low bits laid out as
// Q2_K; the high bit of element 32 * s + l of half h (s = 0..3, l = 0..31) is bit 4h + s of hmask[l].
// 6-bit scales, 12 bytes: scale i low 4 bits = nibble (i / 8) of scales[i % 8] (low nibble first);
// high 2 bits = bits 2 * (i / 4) .. +1 of scales[8 + i % 4].
struct BlockQ3_K {
    uint8_t hmask[kQK_K / 8];
    uint8_t qs[kQK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
// Q4_K: 8 sub-blocks of 32, x = (d * sc) * q - (dmin * m), q a nibble. Sub-blocks (2p, 2p+1) share
// qs[32p .. 32p+31]: low nibbles then high nibbles. 6-bit sc/m packed in 12 bytes (get_scale_min).
struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[kQK_K / 2];
};
// Q5_K: as Q4_K with a fifth bit: element l of sub-block j has its bit 4 at bit j of qh[l].
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[kQK_K / 8];
    uint8_t qs[kQK_K / 2];
};
// Q6_K: 16 sub-blocks of 16, x = (d * scales[i]) * (q - 32), q 6 bits. Per 128-element half
// (ql 64 bytes, qh 32 bytes), element 32 * s + l (s = 0..3, l = 0..31) has its low 4 bits in
// ql[l + 32 * (s & 1)] (low nibble for s < 2, high nibble otherwise) and its high 2 bits at
// bits 2s, 2s+1 of qh[l].
struct BlockQ6_K {
    uint8_t ql[kQK_K / 2];
    uint8_t qh[kQK_K / 4];
    int8_t scales[kQK_K / 16];
    uint16_t d;
};
// Q8_K: x = d * q with an fp32 scale; bsums (sums of 16 q's) only serve dot products.
struct BlockQ8_K {
    float d;
    int8_t qs[kQK_K];
    int16_t bsums[kQK_K / 16];
};

// MXFP4 (ggml block_mxfp4, OCP MX v1.0): 32 E2M1 codes (qs[j] low nibble = element j, high nibble
// = element j + 16) sharing the E8M0 scale e: x = e2m1(code) * 2^(e - 127).
struct BlockMxfp4 {
    uint8_t e;
    uint8_t qs[kQK / 2];
};
// NVFP4 (kiln-internal, see core/dtype.h): 16 E2M1 codes, qs[j] low nibble = element j, high nibble
// = element j + 8; x = e2m1(code) * d, d the fp16 product of the E4M3 block and fp32 tensor scales.
struct BlockNvfp4 {
    uint16_t d;
    uint8_t qs[8];
};
// E4M3_B32 (kiln-internal, core/dtype.h): 32 E4M3 codes with an fp32 scale, x = e4m3(qs[j]) * d.
struct BlockE4m3B32 {
    float d;
    uint8_t qs[kQK];
};
// MXFP8 (kiln-internal, OCP MX v1.0 with E4M3 elements): x = e4m3(qs[j]) * 2^(e - 127).
struct BlockMxfp8 {
    uint8_t e;
    uint8_t qs[kQK];
};
// IQ4_NL (ggml block_iq4_nl): 32 codes of the non-linear levels kIq4Values, nibbles as Q4_0's:
// x = d * kIq4Values[code].
struct BlockIq4Nl {
    uint16_t d;
    uint8_t qs[kQK / 2];
};
// IQ4_XS (ggml block_iq4_xs): 8 sub-blocks of 32, each with a 6-bit scale (see block_layouts.h):
// x = (d * (ls - 32)) * kIq4Values[code].
struct BlockIq4Xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[kQK_K / 64];
    uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIq4Nl) == 18 && sizeof(BlockIq4Xs) == 136);
static_assert(sizeof(BlockMxfp4) == 17 && sizeof(BlockNvfp4) == 10);
static_assert(sizeof(BlockE4m3B32) == 36 && sizeof(BlockMxfp8) == 33);

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

float h2f(uint16_t h) {
    return core::fp16_to_f32(h);
}

template <typename Block>
Block load(const void* src, int64_t block_idx) {
    Block b;
    std::memcpy(&b, static_cast<const uint8_t*>(src) + block_idx * int64_t(sizeof(Block)), sizeof(Block));
    return b;
}

void dequant_q4_0(const BlockQ4_0& b, float* y) {
    const float d = h2f(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
        y[j] = float((b.qs[j] & 0x0f) - 8) * d;
        y[j + kQK / 2] = float((b.qs[j] >> 4) - 8) * d;
    }
}

void dequant_q4_1(const BlockQ4_1& b, float* y) {
    const float d = h2f(b.d), m = h2f(b.m);
    for (int j = 0; j < kQK / 2; ++j) {
        y[j] = float(b.qs[j] & 0x0f) * d + m;
        y[j + kQK / 2] = float(b.qs[j] >> 4) * d + m;
    }
}

uint32_t load_u32(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void dequant_q5_0(const BlockQ5_0& b, float* y) {
    const float d = h2f(b.d);
    const uint32_t qh = load_u32(b.qh);
    for (int j = 0; j < kQK / 2; ++j) {
        const int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + kQK / 2)) & 1;
        y[j] = float(((b.qs[j] & 0x0f) | hi0 << 4) - 16) * d;
        y[j + kQK / 2] = float(((b.qs[j] >> 4) | hi1 << 4) - 16) * d;
    }
}

void dequant_q5_1(const BlockQ5_1& b, float* y) {
    const float d = h2f(b.d), m = h2f(b.m);
    const uint32_t qh = load_u32(b.qh);
    for (int j = 0; j < kQK / 2; ++j) {
        const int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + kQK / 2)) & 1;
        y[j] = float((b.qs[j] & 0x0f) | hi0 << 4) * d + m;
        y[j + kQK / 2] = float((b.qs[j] >> 4) | hi1 << 4) * d + m;
    }
}

template <typename Block>  // Q8_0 and Q8_1
void dequant_q8(const Block& b, float* y) {
    const float d = h2f(b.d);
    for (int j = 0; j < kQK; ++j) y[j] = float(b.qs[j]) * d;
}

void dequant_q2_k(const BlockQ2_K& b, float* y) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int half = 0; half < 2; ++half) {
        const uint8_t* q = b.qs + 32 * half;
        for (int s = 0; s < 4; ++s) {               // 2-bit plane s of the 32 bytes
            for (int part = 0; part < 2; ++part) {  // bytes 0..15 and 16..31 are separate sub-blocks
                const uint8_t sc = b.scales[8 * half + 2 * s + part];
                const float dl = d * float(sc & 0x0f), ml = dmin * float(sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * float((q[16 * part + l] >> (2 * s)) & 3) - ml;
            }
        }
    }
}

// Q3_K sub-block scale i (0..15), 6 bits signed as scale - 32. See BlockQ3_K.
int q3_k_scale(const uint8_t* scales, int i) {
    const int low = (scales[i % 8] >> (4 * (i / 8))) & 0x0f;
    const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (low | high << 4) - 32;
}

void dequant_q3_k(const BlockQ3_K& b, float* y) {
    const float d = h2f(b.d);
    for (int half = 0; half < 2; ++half) {
        const uint8_t* q = b.qs + 32 * half;
        for (int s = 0; s < 4; ++s) {
            const uint8_t hbit = uint8_t(1u << (4 * half + s));
            for (int part = 0; part < 2; ++part) {
                const float dl = d * float(q3_k_scale(b.scales, 8 * half + 2 * s + part));
                for (int l = 16 * part; l < 16 * part + 16; ++l) {
                    const int low = (q[l] >> (2 * s)) & 3;
                    *y++ = dl * float(low - ((b.hmask[l] & hbit) ? 0 : 4));
                }
            }
        }
    }
}

// Q4_K/Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes q:
// j < 4: sc = q[j] & 63, m = q[j + 4] & 63.
// j >= 4: sc = low nibble of q[j + 4] | (top 2 bits of q[j - 4]) << 4,
//         m = high nibble of q[j + 4] | (top 2 bits of q[j]) << 4.
void k4_scale_min(const uint8_t* q, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void dequant_q4_k(const BlockQ4_K& b, float* y) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int pair = 0; pair < 4; ++pair) {
        const uint8_t* q = b.qs + 32 * pair;
        for (int nib = 0; nib < 2; ++nib) {  // sub-block 2 * pair + nib: low nibbles, then high
            int sc, m;
            k4_scale_min(b.scales, 2 * pair + nib, &sc, &m);
            const float dl = d * float(sc), ml = dmin * float(m);
            for (int l = 0; l < 32; ++l) *y++ = dl * float((q[l] >> (4 * nib)) & 0x0f) - ml;
        }
    }
}

void dequant_q5_k(const BlockQ5_K& b, float* y) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int pair = 0; pair < 4; ++pair) {
        const uint8_t* q = b.qs + 32 * pair;
        for (int nib = 0; nib < 2; ++nib) {
            const int sub = 2 * pair + nib;
            int sc, m;
            k4_scale_min(b.scales, sub, &sc, &m);
            const float dl = d * float(sc), ml = dmin * float(m);
            for (int l = 0; l < 32; ++l) {
                const int v = ((q[l] >> (4 * nib)) & 0x0f) | (((b.qh[l] >> sub) & 1) << 4);
                *y++ = dl * float(v) - ml;
            }
        }
    }
}

void dequant_q6_k(const BlockQ6_K& b, float* y) {
    const float d = h2f(b.d);
    for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b.ql + 64 * half;
        const uint8_t* qh = b.qh + 32 * half;
        const int8_t* sc = b.scales + 8 * half;
        for (int s = 0; s < 4; ++s) {
            for (int l = 0; l < 32; ++l) {
                const int low = (ql[l + 32 * (s & 1)] >> (4 * (s >> 1))) & 0x0f;
                const int high = (qh[l] >> (2 * s)) & 3;
                const int q = (low | high << 4) - 32;
                y[32 * s + l] = d * float(sc[2 * s + l / 16]) * float(q);
            }
        }
        y += 128;
    }
}

void dequant_q8_k(const BlockQ8_K& b, float* y) {
    for (int j = 0; j < kQK_K; ++j) y[j] = b.d * float(b.qs[j]);
}

// E2M1 code -> value (OCP MX v1.0 section 5.3.3: sign bit 3, exponent bits 2..1, mantissa bit 0).
constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(e - 127) exactly (e = 0 is the subnormal 2^-127); 0xFF is NaN (MX v1.0 section 5.4.1).
float e8m0_to_f32(uint8_t e) {
    if (e == 0xFF) return __builtin_nanf("");
    const uint32_t bits = e == 0 ? 0x00400000u : uint32_t(e) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

void dequant_mxfp4(const BlockMxfp4& b, float* y) {
    const float d = e8m0_to_f32(b.e);
    for (int j = 0; j < kQK / 2; ++j) {
        y[j] = kE2M1[b.qs[j] & 0x0f] * d;
        y[j + kQK / 2] = kE2M1[b.qs[j] >> 4] * d;
    }
}

void dequant_nvfp4(const BlockNvfp4& b, float* y) {
    const float d = h2f(b.d);
    for (int j = 0; j < 8; ++j) {
        y[j] = kE2M1[b.qs[j] & 0x0f] * d;
        y[j + 8] = kE2M1[b.qs[j] >> 4] * d;
    }
}

// E4M3 codes 0x7F / 0xFF decode to NaN (core::fp8_e4m3_to_f32).
void dequant_e4m3_b32(const BlockE4m3B32& b, float* y) {
    for (int j = 0; j < kQK; ++j) y[j] = core::fp8_e4m3_to_f32(b.qs[j]) * b.d;
}

void dequant_mxfp8(const BlockMxfp8& b, float* y) {
    const float d = e8m0_to_f32(b.e);
    for (int j = 0; j < kQK; ++j) y[j] = core::fp8_e4m3_to_f32(b.qs[j]) * d;
}

void dequant_iq4_nl(const BlockIq4Nl& b, float* y) {
    const float d = h2f(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
        y[j] = d * float(blocks::kIq4Values[b.qs[j] & 0x0f]);
        y[j + kQK / 2] = d * float(blocks::kIq4Values[b.qs[j] >> 4]);
    }
}

void dequant_iq4_xs(const BlockIq4Xs& b, float* y) {
    const float d = h2f(b.d);
    for (int s = 0; s < kQK_K / kQK; ++s) {
        const int ls = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | (((b.scales_h >> (2 * s)) & 3) << 4);
        const float dl = d * float(ls - 32);
        const uint8_t* qs = b.qs + 16 * s;
        for (int j = 0; j < 16; ++j) {
            y[kQK * s + j] = dl * float(blocks::kIq4Values[qs[j] & 0x0f]);
            y[kQK * s + j + 16] = dl * float(blocks::kIq4Values[qs[j] >> 4]);
        }
    }
}

// 256 ternary weights of a TQ block, then x = d * t (gguf-py's order: d times the float value).
void dequant_tq(core::DType type, const uint8_t* b, float* y) {
    int8_t t[kQK_K];
    tq_trits(type, b, t);
    const size_t d_off = type == core::DType::kTq1_0 ? blocks::kTq1_0D : blocks::kTq2_0D;
    const float d = h2f(uint16_t(b[d_off] | b[d_off + 1] << 8));
    for (int i = 0; i < kQK_K; ++i) y[i] = d * float(t[i]);
}

template <typename Block, typename Fn>
void for_blocks(const void* src, float* dst, int64_t num_blocks, int block_size, Fn fn) {
    for (int64_t i = 0; i < num_blocks; ++i) fn(load<Block>(src, i), dst + i * block_size);
}

}  // namespace

bool dequant_supported(core::DType type) {
    switch (type) {
        case core::DType::kF32:
        case core::DType::kF16:
        case core::DType::kBF16:
        case core::DType::kQ4_0:
        case core::DType::kQ4_1:
        case core::DType::kQ5_0:
        case core::DType::kQ5_1:
        case core::DType::kQ8_0:
        case core::DType::kQ8_1:
        case core::DType::kQ2_K:
        case core::DType::kQ3_K:
        case core::DType::kQ4_K:
        case core::DType::kQ5_K:
        case core::DType::kQ6_K:
        case core::DType::kQ8_K:
        case core::DType::kMxfp4:
        case core::DType::kNvfp4:
        case core::DType::kE4m3B32:
        case core::DType::kMxfp8:
        case core::DType::kIq4Nl:
        case core::DType::kIq4Xs:
        case core::DType::kTq1_0:
        case core::DType::kTq2_0:
            return true;
        default:
            return false;
    }
}

core::Status dequantize_row(core::DType type, const void* src, float* dst, int64_t num_elements) {
    if (!dequant_supported(type)) {
        return core::error(core::StatusCode::kUnsupported)
               << "dequantize_row: no dequantizer for " << core::dtype_name(type);
    }
    const int64_t block = core::dtype_info(type).block_size;
    if (num_elements < 0 || num_elements % block != 0) {
        return core::error(core::StatusCode::kInvalidArgument)
               << "dequantize_row: " << num_elements << " elements is not a whole number of " << core::dtype_name(type)
               << " blocks of " << block;
    }
    const int64_t n = num_elements, nb = num_elements / block;
    if (n == 0) return core::Status::ok();
    const uint8_t* p = static_cast<const uint8_t*>(src);
    switch (type) {
        case core::DType::kF32:
            std::memcpy(dst, src, size_t(n) * sizeof(float));
            break;
        case core::DType::kF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = core::fp16_to_f32(uint16_t(p[2 * i] | p[2 * i + 1] << 8));
            break;
        case core::DType::kBF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = core::bf16_to_f32(uint16_t(p[2 * i] | p[2 * i + 1] << 8));
            break;
        case core::DType::kQ4_0:
            for_blocks<BlockQ4_0>(src, dst, nb, kQK, dequant_q4_0);
            break;
        case core::DType::kQ4_1:
            for_blocks<BlockQ4_1>(src, dst, nb, kQK, dequant_q4_1);
            break;
        case core::DType::kQ5_0:
            for_blocks<BlockQ5_0>(src, dst, nb, kQK, dequant_q5_0);
            break;
        case core::DType::kQ5_1:
            for_blocks<BlockQ5_1>(src, dst, nb, kQK, dequant_q5_1);
            break;
        case core::DType::kQ8_0:
            for_blocks<BlockQ8_0>(src, dst, nb, kQK, dequant_q8<BlockQ8_0>);
            break;
        case core::DType::kQ8_1:
            for_blocks<BlockQ8_1>(src, dst, nb, kQK, dequant_q8<BlockQ8_1>);
            break;
        case core::DType::kQ2_K:
            for_blocks<BlockQ2_K>(src, dst, nb, kQK_K, dequant_q2_k);
            break;
        case core::DType::kQ3_K:
            for_blocks<BlockQ3_K>(src, dst, nb, kQK_K, dequant_q3_k);
            break;
        case core::DType::kQ4_K:
            for_blocks<BlockQ4_K>(src, dst, nb, kQK_K, dequant_q4_k);
            break;
        case core::DType::kQ5_K:
            for_blocks<BlockQ5_K>(src, dst, nb, kQK_K, dequant_q5_k);
            break;
        case core::DType::kQ6_K:
            for_blocks<BlockQ6_K>(src, dst, nb, kQK_K, dequant_q6_k);
            break;
        case core::DType::kQ8_K:
            for_blocks<BlockQ8_K>(src, dst, nb, kQK_K, dequant_q8_k);
            break;
        case core::DType::kMxfp4:
            for_blocks<BlockMxfp4>(src, dst, nb, kQK, dequant_mxfp4);
            break;
        case core::DType::kNvfp4:
            for_blocks<BlockNvfp4>(src, dst, nb, 16, dequant_nvfp4);
            break;
        case core::DType::kE4m3B32:
            for_blocks<BlockE4m3B32>(src, dst, nb, kQK, dequant_e4m3_b32);
            break;
        case core::DType::kMxfp8:
            for_blocks<BlockMxfp8>(src, dst, nb, kQK, dequant_mxfp8);
            break;
        case core::DType::kIq4Nl:
            for_blocks<BlockIq4Nl>(src, dst, nb, kQK, dequant_iq4_nl);
            break;
        case core::DType::kIq4Xs:
            for_blocks<BlockIq4Xs>(src, dst, nb, kQK_K, dequant_iq4_xs);
            break;
        case core::DType::kTq1_0:
        case core::DType::kTq2_0: {
            const size_t bytes = core::dtype_info(type).block_bytes;
            for (int64_t i = 0; i < nb; ++i) dequant_tq(type, p + i * int64_t(bytes), dst + i * kQK_K);
            break;
        }
        default:
            break;
    }
    return core::Status::ok();
}

void tq_trits(core::DType type, const uint8_t* b, int8_t* t) {
    if (type == core::DType::kTq2_0) {
        for (int c = 0; c < 2; ++c)
            for (int s = 0; s < 4; ++s)
                for (int j = 0; j < 32; ++j) t[128 * c + 32 * s + j] = int8_t(((b[32 * c + j] >> (2 * s)) & 3) - 1);
        return;
    }
    // TQ1_0: trit m of byte q is ((q * 3^m mod 256) * 3) >> 8.
    auto trit = [](uint8_t q, int m) {
        static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
        const uint8_t v = uint8_t(q * kPow3[m]);
        return int8_t(((uint16_t(v) * 3) >> 8) - 1);
    };
    const uint8_t* qs = b + blocks::kTq1_0Qs;
    const uint8_t* qh = b + blocks::kTq1_0Qh;
    for (int m = 0; m < 5; ++m) {
        for (int j = 0; j < 32; ++j) t[32 * m + j] = trit(qs[j], m);
        for (int j = 0; j < 16; ++j) t[160 + 16 * m + j] = trit(qs[32 + j], m);
    }
    for (int m = 0; m < 4; ++m)
        for (int j = 0; j < 4; ++j) t[240 + 4 * m + j] = trit(qh[j], m);
}

}  // namespace kiln::kernels::ref
