// Kernel bodies for ggml's ternary weights TQ1_0 and TQ2_0 (x = d * t, t in {-1, 0, 1}, 256 elements
// per block, one fp16 d) against ActQ8 activations; see matmul.h for the contract and
// kernels/ref/quant_matmul.cc for the scalar oracle with the same integer arithmetic.
// Both run Legacy's tiles (simd_legacy_kernels.h: lanes = rows, block order, batch invariant) as an
// unsigned format with offset 1: per 32-element sub-block the codes u = t + 1 in {0, 1, 2} are dotted
// with the activation block (u8 x s8, exact) and sum(x) taken off once per block, scaled by d * d_x.
// TQ2_0 reads its 2-bit codes in place (one shift and mask per sub-block); TQ1_0 packs five trits per
// byte in base 3, so its row source decodes each row's 256 codes once per super-block into a buffer
// ((q * 3^m mod 256) * 3 >> 8 in 16-bit lanes, 32 bytes at a time) that the sub-blocks then read.
// The rows' d are read once per super-block too. No packed layout.
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

// Unsigned codes in {0, 1, 2} (t + 1) through Legacy's offset path; kBytes: the share of a
// super-block per 32 elements, rounded down (only the decode prefetch's step).
template <size_t kBlockBytes>
struct FmtTq {
    static constexpr size_t kBytes = kBlockBytes / 8;
    static constexpr bool kSigned = false, kMin = false;
    static constexpr int kOffset = 1;
};

// The fp16 d of the 8 rows' super-block (at byte d_off), once per super-block.
inline __m256 tq_row_scales(const uint8_t* const* rows, int64_t super_off, size_t d_off) {
    alignas(16) uint16_t h[8];
    for (int i = 0; i < 8; ++i) std::memcpy(&h[i], rows[i] + super_off + d_off, 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// TQ2_0: sub-block k of a super-block is bits 2s, 2s + 1 of qs[32c .. 32c + 31] (c = k / 4, s = k % 4).
struct Tq2Src {
    using Decoded = Rows8;
    const uint8_t* const* rows;
    mutable __m256 d = _mm256_setzero_ps();
    mutable int64_t d_of = -1;
    void decode(int64_t b, Rows8* w) const {
        const int64_t off = (b / 8) * int64_t(blk::kTq2_0Bytes) + blk::kTq2_0Qs + 32 * ((b % 8) / 4);
        const __m128i shift = _mm_cvtsi32_si128(int(2 * (b % 4)));
        const __m256i mask = _mm256_set1_epi8(3);
        for (int i = 0; i < 8; ++i) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + off));
            w->wq[i] = _mm256_and_si256(_mm256_srl_epi16(v, shift), mask);
        }
    }
    void scales(int64_t b, __m256* dw, __m256*) const {
        if (b / 8 != d_of) {
            d = tq_row_scales(rows, (b / 8) * int64_t(blk::kTq2_0Bytes), blk::kTq2_0D);
            d_of = b / 8;
        }
        *dw = d;
    }
};

// Trit m (0..4) of each of 32 bytes as an unsigned code: ((q * 3^m mod 256) * 3) >> 8.
inline __m256i tq1_codes32(__m256i q, int m) {
    static constexpr short kPow3[5] = {1, 3, 9, 27, 81};
    const __m256i p = _mm256_set1_epi16(kPow3[m]), ff = _mm256_set1_epi16(0xFF), three = _mm256_set1_epi16(3);
    const __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(q, ff), p), ff);
    const __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(q, 8), p), ff);
    const __m256i clo = _mm256_srli_epi16(_mm256_mullo_epi16(lo, three), 8);
    const __m256i chi = _mm256_srli_epi16(_mm256_mullo_epi16(hi, three), 8);
    return _mm256_or_si256(clo, _mm256_slli_epi16(chi, 8));
}

// The 256 codes of one TQ1_0 block in element order (block_layouts.h).
inline void tq1_decode(const uint8_t* b, uint8_t* codes) {
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + blk::kTq1_0Qs));
    const __m256i q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + blk::kTq1_0Qs + 32)));
    int32_t qh;
    std::memcpy(&qh, b + blk::kTq1_0Qh, 4);
    const __m256i q2 = _mm256_set1_epi32(qh);
    for (int m = 0; m < 5; ++m) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 32 * m), tq1_codes32(q0, m));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 160 + 16 * m), _mm256_castsi256_si128(tq1_codes32(q1, m)));
    }
    for (int m = 0; m < 4; ++m) {
        const int32_t c = _mm256_cvtsi256_si32(tq1_codes32(q2, m));
        std::memcpy(codes + 240 + 4 * m, &c, 4);
    }
}

struct Tq1Src {
    using Decoded = Rows8;
    const uint8_t* const* rows;
    mutable __m256 d = _mm256_setzero_ps();
    mutable int64_t decoded_of = -1;  // the super-block codes and d hold
    alignas(32) mutable uint8_t codes[8][blk::kQK_K] = {};
    void fill(int64_t super) const {
        if (super == decoded_of) return;
        for (int i = 0; i < 8; ++i) tq1_decode(rows[i] + super * int64_t(blk::kTq1_0Bytes), codes[i]);
        d = tq_row_scales(rows, super * int64_t(blk::kTq1_0Bytes), blk::kTq1_0D);
        decoded_of = super;
    }
    void decode(int64_t b, Rows8* w) const {
        fill(b / 8);
        for (int i = 0; i < 8; ++i)
            w->wq[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[i] + 32 * (b % 8)));
    }
    void scales(int64_t b, __m256* dw, __m256*) const {
        fill(b / 8);
        *dw = d;
    }
};

constexpr MatmulKernel kTq1_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, rows_gemm<FmtTq<blk::kTq1_0Bytes>, Tq1Src>};
constexpr MatmulKernel kTq2_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, rows_gemm<FmtTq<blk::kTq2_0Bytes>, Tq2Src>};

inline const MatmulKernel* simd_tq_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kTq1_0:
            return &kTq1_0;
        case core::DType::kTq2_0:
            return &kTq2_0;
        default:
            return nullptr;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
