// Kernel bodies for ggml's non-linear 4-bit weights IQ4_NL (block_iq4_nl) and IQ4_XS (block_iq4_xs)
// against ActQ8 activations; see matmul.h for the contract and kernels/ref/quant_matmul.cc for the
// scalar oracle with the same integer arithmetic.
// Per 32 elements and weight row: the nibble codes become the int8 levels kIq4Values (-127 .. 113)
// through one 16-entry pshufb, and Legacy's signed block dot (simd_legacy_kernels.h: |w| x sign(x, w),
// u8 x s8 pairs <= 2 * 127 * 127, exact in int16; one vpdpbusd per row where the TU has VNNI) gives
// the exact int32 dot, scaled by d_w * d_x. IQ4_NL is a Legacy format (one fp16 d per 32); IQ4_XS
// keeps 8 sub-blocks per 256-element super-block, each scaled by d * (ls - 32) (its 6-bit scale), so
// it has its own row source, which decodes the 8 rows' sub-block scales once per super-block.
// Both run Legacy's tiles (lanes = rows, block order, the same lane operations whatever n or the
// row range: batch invariant). No packed layout (matmul.h PackedMatmulKernel): the row layout is
// read as stored.
// Include ONLY from ISA TUs (matmul_avx2.cc, matmul_avx512.cc, matmul_avx512vnni.cc): everything
// here has internal linkage, so each TU gets its own copy compiled with its own instruction set.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/block_layouts.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_legacy_kernels.h"

namespace kiln::kernels::cpu {
namespace {

// The 32 codes of a Q4_0-style nibble payload mapped to their int8 levels.
inline __m256i iq4_levels32(const uint8_t* qs) {
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk::kIq4Values)));
    return _mm256_shuffle_epi8(lut, nibbles32(qs));
}

struct FmtIq4Nl {
    static constexpr size_t kBytes = blk::kIq4NlBytes, kD = blk::kIq4NlD, kM = 0;
    static constexpr size_t kPayloadOff = blk::kIq4NlQs, kPayload = 16;
    static constexpr bool kSigned = true, kMin = false;
    static constexpr int kOffset = 0;
    static __m256i load_payload(const uint8_t* p) { return iq4_levels32(p); }
};

// IQ4_XS through Legacy's tile: kBytes is the super-block's share per 32 elements (the decode
// prefetch's step); Iq4XsSrc below does the reading.
struct FmtIq4Xs {
    static constexpr size_t kBytes = blk::kIq4XsBytes / 8;
    static constexpr bool kSigned = true, kMin = false;
    static constexpr int kOffset = 0;
};
static_assert(blk::kIq4XsBytes % 8 == 0);

// 8 rows x 8 floats -> 8 columns: v[j] lane i = v_in[i] lane j.
inline void transpose8x8(__m256* v) {
    const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    v[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    v[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    v[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    v[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    v[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    v[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    v[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    v[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// The 8 sub-block scales d * (ls - 32) of one IQ4_XS super-block, lane s = sub-block s, in fp32 as
// the ref computes them: ls_s = (scales_l as u32 >> 4s) & 15 | ((scales_h >> 2s) & 3) << 4.
inline __m256 iq4_xs_sub_scales(const uint8_t* sb) {
    uint16_t h, sh;
    uint32_t sl;
    std::memcpy(&h, sb + blk::kIq4XsD, 2);
    std::memcpy(&sh, sb + blk::kIq4XsScalesH, 2);
    std::memcpy(&sl, sb + blk::kIq4XsScalesL, 4);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(sl)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(15));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), _mm256_cvtepi32_ps(ls));
}

// The 8 rows of an IQ4_XS group, sub-block b (32 elements) at a time. The rows' sub-block scales are
// decoded once per super-block (8 rows x 8 sub-blocks, transposed so that each sub-block's 8 rows
// are one vector) and kept while the tile walks its 8 sub-blocks.
struct Iq4XsSrc {
    using Decoded = Rows8;
    const uint8_t* const* rows;
    mutable __m256 sub_scales[8] = {};
    mutable int64_t scales_of = -1;  // the super-block sub_scales holds
    static const uint8_t* super(const uint8_t* row, int64_t b) { return row + (b / 8) * int64_t(blk::kIq4XsBytes); }
    void decode(int64_t b, Rows8* w) const {
        for (int i = 0; i < 8; ++i) w->wq[i] = iq4_levels32(super(rows[i], b) + blk::kIq4XsQs + 16 * (b % 8));
    }
    void scales(int64_t b, __m256* dw, __m256*) const {
        if (b / 8 != scales_of) {
            for (int i = 0; i < 8; ++i) sub_scales[i] = iq4_xs_sub_scales(super(rows[i], b));
            transpose8x8(sub_scales);
            scales_of = b / 8;
        }
        *dw = sub_scales[b % 8];
    }
};

constexpr MatmulKernel kIq4Nl{ActFormat::kQ8, q8_row_bytes, quantize_q8, Legacy<FmtIq4Nl>::gemm};
constexpr MatmulKernel kIq4Xs{ActFormat::kQ8, q8_row_bytes, quantize_q8, rows_gemm<FmtIq4Xs, Iq4XsSrc>};

inline const MatmulKernel* simd_iq4_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kIq4Nl:
            return &kIq4Nl;
        case core::DType::kIq4Xs:
            return &kIq4Xs;
        default:
            return nullptr;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
