// Kernel bodies for the FP8 (E4M3) weight formats E4M3_B32 ({fp32 d; 32 codes}) and MXFP8 ({E8M0 e;
// 32 codes}) against f32 activations (ActFormat::kF32); the scalar oracle is fp8_row_dot in
// kernels/ref/quant_matmul.cc. There is no integer path: E4M3 values span 2^-9 .. 448, so they are
// not small integers, and CPUs before AVX10.2 have no FP8 arithmetic.
// Decode of 16 codes to f32 (5 instructions): sign-extend the bytes to int16, shift left by 7 and
// clear bit 14. That moves the E4M3 sign to the fp16 sign bit and the 4 exponent + 3 mantissa bits to
// fp16 exponent bits 10-13 and mantissa bits 7-9, i.e. the fp16 number whose value is exactly
// e4m3 * 2^-8 (exponent bias 15 instead of 7; E4M3 subnormals land on fp16 subnormals with the same
// factor), then vcvtph2ps converts it exactly. The 2^8 is applied once per output, after the sum
// (the accumulators hold y / 256: far from fp32 underflow for any real weights). The NaN codes
// 0x7F / 0xFF would decode to +-480 instead of NaN: the loaders reject weights that hold them
// (quant/fp8_blocks.h), so they never reach a kernel.
// Per block, row and activation row: one fp32 vector of the 32 products (mul + 3 FMA), then one FMA
// with the block scale into the row's accumulator (lanes = elements, horizontal sum at the end).
// Include ONLY from ISA TUs (matmul_avx2.cc, matmul_avx512.cc, matmul_avx512vnni.cc): internal
// linkage, each TU compiles its own copy with its own instruction set.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/matmul.h"
#include "kernels/block_layouts.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_legacy_kernels.h"

namespace kiln::kernels::cpu {
namespace {

// E8M0 code -> the fp32 bits of 2^(e - 127) (e = 0: the subnormal 2^-127; 0xFF, NaN, never reaches
// a kernel: the loaders reject it).
struct E8m0Table {
    uint32_t bits[256];
    constexpr E8m0Table() : bits() {
        for (uint32_t e = 0; e < 256; ++e) bits[e] = e == 0 ? 0x00400000u : e << 23;
    }
};
constexpr E8m0Table kE8m0Bits;

// scale(b): the block scale broadcast to 8 lanes.
struct FmtE4m3B32 {
    static constexpr int64_t kBytes = int64_t(blk::kE4m3B32Bytes);
    static constexpr int64_t kQs = int64_t(blk::kE4m3B32Qs);
    static __m256 scale(const uint8_t* b) { return _mm256_set1_ps(avx2_load_f32(b + blk::kE4m3B32D)); }
};

struct FmtMxfp8 {
    static constexpr int64_t kBytes = int64_t(blk::kMxfp8Bytes);
    static constexpr int64_t kQs = int64_t(blk::kMxfp8Qs);
    static __m256 scale(const uint8_t* b) {
        return _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(kE8m0Bits.bits[b[blk::kMxfp8E]])));
    }
};

// 16 E4M3 codes -> 16 floats, each e4m3 * 2^-8 exactly (see the top of this file).
inline void fp8_decode16(const uint8_t* p, __m256* lo, __m256* hi) {
    __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    v = _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(int16_t(0xBFFF)));
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
}

template <class Fmt>
struct Fp8 {
    static constexpr int kDecodeRows = 4;
    static constexpr int kPrefillRows = 2;

    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        __m256 acc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
        }
        const int64_t nb = k / blk::kQK;
        for (int64_t i = 0; i < nb; ++i) {
            if constexpr (T == 1) avx2_prefetch_next_group(w + R * int64_t(wrb), R * Fmt::kBytes, i);
            for (int r = 0; r < R; ++r) {
                const uint8_t* b = w + r * int64_t(wrb) + i * Fmt::kBytes;
                __m256 w0, w1, w2, w3;
                fp8_decode16(b + Fmt::kQs, &w0, &w1);
                fp8_decode16(b + Fmt::kQs + 16, &w2, &w3);
                const __m256 d = Fmt::scale(b);
                for (int t = 0; t < T; ++t) {
                    const float* x = reinterpret_cast<const float*>(act + t * int64_t(arb)) + i * blk::kQK;
                    __m256 s = _mm256_mul_ps(w0, _mm256_loadu_ps(x));
                    s = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), s);
                    s = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), s);
                    s = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), s);
                    acc[r][t] = _mm256_fmadd_ps(s, d, acc[r][t]);
                }
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) y[t * ldy + r] = avx2_hsum(acc[r][t]) * 256.0f;  // the decode's 2^-8
        }
    }
};

constexpr MatmulKernel kE4m3B32{ActFormat::kF32, f32_row_bytes, copy_row, avx2_gemm<Fp8<FmtE4m3B32>>};
constexpr MatmulKernel kMxfp8{ActFormat::kF32, f32_row_bytes, copy_row, avx2_gemm<Fp8<FmtMxfp8>>};

inline const MatmulKernel* simd_fp8_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kE4m3B32:
            return &kE4m3B32;
        case core::DType::kMxfp8:
            return &kMxfp8;
        default:
            return nullptr;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
