// Kernel bodies for the E2M1 (FP4) weight formats MXFP4 (ggml block_mxfp4) and NVFP4 (kiln's
// 16-element block, core/dtype.h) against ActQ8 activations; see matmul.h for the contract and
// kernels/ref/quant_matmul.cc for the scalar oracle with the same integer arithmetic.
// Per 32 elements and weight row: the nibble codes become the doubled E2M1 values ({0, 1, 2, 3, 4,
// 6, 8, 12} and negatives, blocks::kE2M1x2) plus 12, as unsigned bytes in [0, 24], through one
// 16-entry pshufb; the u8 x s8 dot with the activation (maddubs + madd on AVX2, one vpdpbusd where
// the TU has a 256-bit one: avx-vnni, avx512-vnni) minus 12 sum(x) (once per activation block, shared by the rows)
// is the exact int32 dot of the doubled values, scaled by d_w * (d_x / 2). ggml's IQ4_NL / MXFP4
// kernels use the sign trick |w| x sign(x, w) instead; the offset form drops the per-token sign and
// abs of every row (measured in docs/performance.md, "4-bit float weights").
// NVFP4 has two scales per 32 elements: the 16-element halves keep their own int32 sums (the
// 128-bit halves of the reductions below) and accumulate into two fp32 vectors that are folded
// into one per row at the end.
// Tiles are lanes = rows as in simd_legacy_kernels.h (8 weight rows per fp32 vector, up to 4
// activation rows per weight decode), and y[t * ldy + r] gets the same lane operations whatever n,
// the row range or the tile (batch invariance).
// Include ONLY from ISA TUs (matmul_avx2.cc, matmul_avx512.cc, matmul_avx512vnni.cc): everything
// here has internal linkage, so each TU gets its own copy compiled with its own instruction set.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/matmul.h"
#include "kernels/block_layouts.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_legacy_kernels.h"

namespace kiln::kernels::cpu {
namespace {

// MXFP4: one 17-byte block per 32 elements, one E8M0 scale per row and block.
struct FmtMxfp4 {
    static constexpr int64_t kUnitBytes = int64_t(blk::kMxfp4Bytes);
    static constexpr bool kTwoScales = false;
    static __m256i codes(const uint8_t* u) { return nibbles32(u + blk::kMxfp4Qs); }
};

// NVFP4: two 10-byte blocks per 32 elements; bytes 0-7 of the result are the low nibbles of the
// first block (elements 0-7), 8-15 its high nibbles (8-15), 16-31 the same for the second block.
struct FmtNvfp4 {
    static constexpr int64_t kUnitBytes = 2 * int64_t(blk::kNvfp4Bytes);
    static constexpr bool kTwoScales = true;
    static __m256i codes(const uint8_t* u) {
        int64_t lo, hi;
        std::memcpy(&lo, u + blk::kNvfp4Qs, 8);
        std::memcpy(&hi, u + blk::kNvfp4Bytes + blk::kNvfp4Qs, 8);
        const __m256i v = _mm256_setr_epi64x(lo, lo, hi, hi);
        return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 4, 0, 4)), _mm256_set1_epi8(0x0f));
    }
};

// The doubled E2M1 values are shifted by kFp4Offset to unsigned u = 2 e2m1 + 12 in [0, 24], so the
// u8 x s8 dot takes the weights as they are (no per-token sign/abs work, as Q4_0's q - 8):
// dot(2 e2m1, x) = dot(u, x) - 12 sum(x), the offset term computed once per activation block.
constexpr int kFp4Offset = 12;

// 12 * sum(x) over each 128-bit half of xq, reduced exactly like fp4_half_dots4 reduces a row: in
// every dword of the result's half h, the offset term of that half (int16 lanes without VNNI).
inline __m256i fp4_offset_term(__m256i xq) {
#if defined(KILN_VNNI256)
    const __m256i o = avx2_dot_u8s8(_mm256_set1_epi8(kFp4Offset), xq);
    const __m256i p = pair_i32(o, o);
    return quad_i32(p, p);
#else
    const __m256i o = _mm256_maddubs_epi16(_mm256_set1_epi8(kFp4Offset), xq);
    const __m256i p = pair_i16(o, o);
    return quad_i16(p, p);
#endif
}

// Per 128-bit half h (elements 16h .. 16h + 15), dword i of the result's half h = exact int32 dot of
// weight row i (of 4, unsigned u) with the activation over that half, offset removed:
// [r0 r1 r2 r3 | r0 r1 r2 r3]. Without VNNI the first two reduction levels (8 products) are int16
// sums: |8 u x| <= 8 * 24 * 127 = 24384 and maddubs pairs <= 6096, so nothing saturates or wraps.
inline __m256i fp4_half_dots4(const __m256i* wu, __m256i xq, __m256i offset_term) {
#if defined(KILN_VNNI256)
    __m256i v[4];
    for (int i = 0; i < 4; ++i) v[i] = avx2_dot_u8s8(wu[i], xq);
    return _mm256_sub_epi32(quad_i32(pair_i32(v[0], v[1]), pair_i32(v[2], v[3])), offset_term);
#else
    __m256i p[4];
    for (int i = 0; i < 4; ++i) p[i] = _mm256_maddubs_epi16(wu[i], xq);
    const __m256i q = _mm256_sub_epi16(quad_i16(pair_i16(p[0], p[1]), pair_i16(p[2], p[3])), offset_term);
    return _mm256_madd_epi16(q, _mm256_set1_epi16(1));
#endif
}

template <class Fmt>
struct Fp4 {
    static constexpr int kRows = 8;
    static constexpr int kMaxTokens = 4;

    // 2^(e - 127) per lane from the E8M0 bytes (e = 0 is the subnormal 2^-127, as the ref).
    static __m256 e8m0_scales(const uint8_t* const* rows, int64_t boff) {
        const __m256i e = _mm256_setr_epi32(rows[0][boff], rows[1][boff], rows[2][boff], rows[3][boff], rows[4][boff],
                                            rows[5][boff], rows[6][boff], rows[7][boff]);
        return _mm256_castsi256_ps(_mm256_max_epi32(_mm256_slli_epi32(e, 23), _mm256_set1_epi32(0x00400000)));
    }

    // NVFP4 scales of rows [4g, 4g + 4): [first block's d of each row | second block's d of each row].
    static __m256 nv_scales(const uint8_t* const* rows, int64_t boff, int g) {
        uint16_t h[8];
        for (int i = 0; i < 4; ++i) {
            std::memcpy(&h[i], rows[4 * g + i] + boff + blk::kNvfp4D, 2);
            std::memcpy(&h[4 + i], rows[4 * g + i] + boff + blk::kNvfp4Bytes + blk::kNvfp4D, 2);
        }
        return _mm256_cvtph_ps(_mm_setr_epi16(short(h[0]), short(h[1]), short(h[2]), short(h[3]), short(h[4]),
                                              short(h[5]), short(h[6]), short(h[7])));
    }

    // rows[i]: weight row of lane i; y + i its output column; lanes [0, valid) are stored.
    // next_group (decode): where the next 8 contiguous rows start, prefetched unit by unit.
    // Keep every fp32 multiply feeding an fma's multiplicand (see Legacy in simd_legacy_kernels.h).
    template <int T>
    static void tile8(const uint8_t* const* rows, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy,
                      int valid, const uint8_t* next_group) {
        __m256 acc[T], acc2[T];  // MXFP4: acc lanes = rows. NVFP4: acc rows 0-3, acc2 rows 4-7 (x 2 halves)
        for (int t = 0; t < T; ++t) {
            acc[t] = _mm256_setzero_ps();
            acc2[t] = _mm256_setzero_ps();
        }
        const __m256i lut = _mm256_add_epi8(
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk::kE2M1x2))),
            _mm256_set1_epi8(kFp4Offset));
        const int64_t nu = k / blk::kQK;
        for (int64_t b = 0; b < nu; ++b) {
            if (next_group) avx2_prefetch_next_group(next_group, kRows * Fmt::kUnitBytes, b);
            const int64_t boff = b * Fmt::kUnitBytes;
            __m256i wq[kRows];
            for (int i = 0; i < kRows; ++i) wq[i] = _mm256_shuffle_epi8(lut, Fmt::codes(rows[i] + boff));
            __m256 d0, d1;
            if constexpr (Fmt::kTwoScales) {
                d0 = nv_scales(rows, boff, 0);
                d1 = nv_scales(rows, boff, 1);
            } else {
                d0 = e8m0_scales(rows, boff);
                d1 = d0;
            }
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes);
                const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + blk::kActQ8Q));
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8D, 4);
                const __m256 hx = _mm256_set1_ps(0.5f * dx);
                const __m256i off = fp4_offset_term(xq);
                const __m256i s0123 = fp4_half_dots4(wq, xq, off), s4567 = fp4_half_dots4(wq + 4, xq, off);
                if constexpr (Fmt::kTwoScales) {
                    accumulate_block<false>(_mm256_mul_ps(d0, hx), s0123, d0, xb, &acc[t], nullptr);
                    accumulate_block<false>(_mm256_mul_ps(d1, hx), s4567, d1, xb, &acc2[t], nullptr);
                } else {
                    accumulate_block<false>(_mm256_mul_ps(d0, hx), halves_i32(s0123, s4567), d0, xb, &acc[t], nullptr);
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            __m256 sum = acc[t];
            if constexpr (Fmt::kTwoScales) {  // [rows 0-3 | rows 4-7], each the sum of its two halves
                sum = _mm256_add_ps(_mm256_blend_ps(acc[t], acc2[t], 0xf0),
                                    _mm256_permute2f128_ps(acc[t], acc2[t], 0x21));
            }
            store_rows8(y + t * ldy, sum, valid);
        }
    }

    // MatmulKernel::gemm: Legacy's group loop (run_groups in simd_legacy_kernels.h).
    static void gemm(const void* w, size_t wrb, const void* act, size_t arb, int64_t n, int64_t k, float* y,
                     int64_t ldy, int64_t r0, int64_t r1) {
        const uint8_t* wb = static_cast<const uint8_t*>(w);
        const uint8_t* rows[kRows];
        auto at = [&](int64_t r) {
            const int valid = group_rows8(wb, wrb, r, r1, rows);
            return RowGroup<const uint8_t* const*>{rows, valid, wb + (r + kRows) * int64_t(wrb)};
        };
        run_groups<Fp4>(at, static_cast<const uint8_t*>(act), arb, n, k, y, ldy, r0, r1);
    }
};

constexpr MatmulKernel kMxfp4{ActFormat::kQ8, q8_row_bytes, quantize_q8, Fp4<FmtMxfp4>::gemm};
constexpr MatmulKernel kNvfp4{ActFormat::kQ8, q8_row_bytes, quantize_q8, Fp4<FmtNvfp4>::gemm};

inline const MatmulKernel* simd_fp4_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kMxfp4:
            return &kMxfp4;
        case core::DType::kNvfp4:
            return &kNvfp4;
        default:
            return nullptr;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
