// Packed F32 / F16 / BF16 weights at the AVX-512 levels (matmul_avx512.cc, matmul_avx512vnni.cc;
// BF16 at avx512-vnni only, which includes AVX512-BF16): an outer-product GEMM in the manner of BLAS
// microkernels, instead of the row-dot tiles of Float (simd_legacy_kernels.h) and Bf16Dot
// (simd_vnni_kernels.h), whose horizontal sums and one activation load per row tile cap prefill
// well below the FMA / vdpbf16ps peak.
//
// Layout (PackedMatmulKernel, matmul.h): rows in panels of 16 (one zmm), each panel a sequence of
// steps: one column (F32, F16: 16 values, 64 / 32 bytes) or one pair of columns (BF16: lane r holds
// row r's columns 2s, 2s + 1; 64 bytes). Element (r, c) of F32 / F16 at panel r / 16, offset
// (c * 16 + r % 16) elements; the last panel's missing rows (and BF16's odd last column) are zeros.
//
// Arithmetic: per (row, token), columns are taken in blocks of kKc = 256; within a block one fp32
// chain in column order starting from zero (an fma per column, or a vdpbf16ps per pair: both exact
// products added, denormals flushed, as Bf16Dot); the block sums are added to y in block order
// (y = block 0, then y += block 1, ...). Every tile shape (1 or 2 panels x 1..12 tokens), row range
// and token count runs exactly that sequence per output, so results are batch invariant and
// independent of the thread split. They are not the bits of the unpacked kernels (another summation
// order); all are within the 1e-5 bound of sum |w x| against the ref kernel (kernels/cpu/matmul.h).
//
// Tiles: 2 panels (32 rows) x 12 tokens = 24 zmm accumulators; per step, 12 broadcasts of the
// tokens' step values (an f32, or a bf16 pair) and 2 weight loads feed 24 FMAs / vdpbf16ps. Tokens
// are packed per call, step-major in tiles of up to 12 (value c of token t at c * T + t), 48 at a
// time (a thread-local buffer that grows once); a single token (decode) is read in place. Loop order
// per 48 tokens: 32-row block, then column block, then token tile, so the weight block (32 x 256
// columns: 32 KiB f32) stays in L1 while every tile uses it.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"

#if !defined(__AVX512F__)
#error "simd_float_packed.h needs -mavx512f"
#endif

namespace kiln::kernels::cpu {
namespace {

// Element policies. A step is one column (F32, F16) or one pair of columns (BF16: vdpbf16ps takes
// two per 32-bit lane); kStepBytes: one step of one panel; kActBytes: one activation element.
// madd(acc, w, x): acc + the step's product(s) of the panel's 16 rows with the token's step value x
// (the activation's bits: an f32, or two bf16).
struct PackedElemF32 {
    static constexpr int kStep = 1;
    static constexpr size_t kBytes = 4, kActBytes = 4;
    static constexpr int64_t kStepBytes = 64;
    static __m512 madd(__m512 acc, const uint8_t* w, __m512i x) {
        return _mm512_fmadd_ps(_mm512_loadu_ps(w), _mm512_castsi512_ps(x), acc);
    }
};
struct PackedElemF16 {
    static constexpr int kStep = 1;
    static constexpr size_t kBytes = 2, kActBytes = 4;
    static constexpr int64_t kStepBytes = 32;
    static __m512 madd(__m512 acc, const uint8_t* w, __m512i x) {
        // the maskz form: GCC 12 warns that _mm512_cvtph_ps's undefined source is uninitialized
        const __m512 wv = _mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
        return _mm512_fmadd_ps(wv, _mm512_castsi512_ps(x), acc);
    }
};
#if defined(__AVX512BF16__)
// BF16 weights x bf16 activations (ActFormat::kBF16): lane r of a step holds row r's columns 2s and
// 2s + 1; vdpbf16ps adds both exact products to the lane's sum (denormals flushed, as Bf16Dot).
struct PackedElemBF16 {
    static constexpr int kStep = 2;
    static constexpr size_t kBytes = 2, kActBytes = 2;
    static constexpr int64_t kStepBytes = 64;
    static __m512 madd(__m512 acc, const uint8_t* w, __m512i x) {
        return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w), (__m512bh)x);
    }
};
#endif

template <class Elem>
struct FloatPacked {
    static constexpr int kPanel = 16;    // rows per panel (one zmm)
    static constexpr int kTile = 12;     // tokens per tile
    static constexpr int kChunk = 48;    // tokens packed per pass
    static constexpr int64_t kKc = 256;  // columns per block (a multiple of every kStep)

    static int64_t steps(int64_t k) { return (k + Elem::kStep - 1) / Elem::kStep; }

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kPanel - 1) / kPanel) * size_t(steps(k)) * size_t(Elem::kStepBytes);
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        const uint8_t* src = static_cast<const uint8_t*>(w);
        uint8_t* out = static_cast<uint8_t*>(dst);
        std::memset(out, 0, packed_bytes(rows, k));  // padding rows and the odd column of a BF16 pair
        const int64_t pstride = steps(k) * Elem::kStepBytes;
        for (int64_t r = 0; r < rows; ++r) {
            uint8_t* panel = out + (r / kPanel) * pstride + (r % kPanel) * int64_t(Elem::kBytes) * Elem::kStep;
            const uint8_t* row = src + r * int64_t(wrb);
            for (int64_t c = 0; c < k; ++c) {
                std::memcpy(panel + (c / Elem::kStep) * Elem::kStepBytes + (c % Elem::kStep) * int64_t(Elem::kBytes),
                            row + c * int64_t(Elem::kBytes), Elem::kBytes);
            }
        }
    }

    // y[t * ldy + r] (+)= the column block's dot for P panels (stride pstride bytes) x T tokens over ns
    // steps; xp: token t's step value c at xp[c * T + t]; valid: rows of the last panel to write.
    template <int P, int T>
    static void tile(const uint8_t* w, int64_t pstride, const uint32_t* xp, int64_t ns, float* y, int64_t ldy,
                     int valid, bool first) {
        __m512 acc[P][T];
        for (int p = 0; p < P; ++p) {
            for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
        }
        for (int64_t c = 0; c < ns; ++c) {
            for (int t = 0; t < T; ++t) {
                const __m512i xv = _mm512_set1_epi32(int(xp[c * T + t]));
                for (int p = 0; p < P; ++p) acc[p][t] = Elem::madd(acc[p][t], w + p * pstride + c * Elem::kStepBytes, xv);
            }
        }
        for (int p = 0; p < P; ++p) {
            const int rows = p + 1 < P ? kPanel : valid;
            const __mmask16 m = rows >= kPanel ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
            for (int t = 0; t < T; ++t) {
                float* out = y + t * ldy + p * kPanel;
                __m512 v = acc[p][t];
                if (!first) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out), v);
                _mm512_mask_storeu_ps(out, m, v);
            }
        }
    }

    template <int P, int T = kTile>
    static void tile_n(int num_t, const uint8_t* w, int64_t pstride, const uint32_t* xp, int64_t ns, float* y,
                       int64_t ldy, int valid, bool first) {
        if constexpr (T > 1) {
            if (num_t < T) return tile_n<P, T - 1>(num_t, w, pstride, xp, ns, y, ldy, valid, first);
        }
        tile<P, T>(w, pstride, xp, ns, y, ldy, valid, first);
    }

    // Token t's step values into xb (tiles of up to kTile tokens: tile s at s * steps, value c of token
    // t at c * T + t); the odd column of a BF16 pair is zero.
    static void pack_tokens(const uint8_t* act, size_t arb, int64_t nt, int64_t k, uint32_t* xb) {
        const int64_t ns = steps(k);
        for (int64_t s = 0; s < nt; s += kTile) {
            const int64_t T = nt - s < kTile ? nt - s : kTile;
            uint32_t* dst = xb + s * ns;
            for (int64_t t = 0; t < T; ++t) {
                const uint8_t* row = act + (s + t) * int64_t(arb);
                const int64_t whole = k / Elem::kStep;
                for (int64_t c = 0; c < whole; ++c) std::memcpy(&dst[c * T + t], row + c * 4, 4);
                if (whole < ns) {
                    uint32_t v = 0;
                    std::memcpy(&v, row + whole * 4, size_t(k % Elem::kStep) * Elem::kActBytes);
                    dst[whole * T + t] = v;
                }
            }
        }
    }

    // PackedMatmulKernel::gemm; act: f32 rows (F32, F16) or bf16 rows (BF16); r0 a multiple of 16.
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        const uint8_t* base = static_cast<const uint8_t*>(packed);
        const uint8_t* ab = static_cast<const uint8_t*>(act);
        const int64_t ns = steps(k), pstride = ns * Elem::kStepBytes, kKcSteps = kKc / Elem::kStep;
        if (k == 0) {  // empty rows: the dot is 0
            for (int64_t t = 0; t < n; ++t) std::fill(y + t * ldy + r0, y + t * ldy + r1, 0.0f);
            return;
        }
        thread_local std::vector<uint32_t> xbuf;
        for (int64_t t0 = 0; t0 < n; t0 += kChunk) {
            const int64_t nt = n - t0 < kChunk ? n - t0 : kChunk;
            const uint8_t* a0 = ab + t0 * int64_t(arb);
            const uint32_t* xs;
            if (nt == 1 && k % Elem::kStep == 0 && reinterpret_cast<uintptr_t>(a0) % 4 == 0) {
                xs = reinterpret_cast<const uint32_t*>(a0);  // one token: its row is the step values in order
            } else {
                if (xbuf.size() < size_t(nt * ns)) xbuf.resize(size_t(nt * ns));
                pack_tokens(a0, arb, nt, k, xbuf.data());
                xs = xbuf.data();
            }
            for (int64_t r = r0; r < r1; r += 2 * kPanel) {
                const uint8_t* w = base + (r / kPanel) * pstride;
                const int64_t left = r1 - r;
                const bool two = left > kPanel;
                const int valid = int(two ? (left < 2 * kPanel ? left - kPanel : kPanel) : left);
                for (int64_t c0 = 0; c0 < ns; c0 += kKcSteps) {
                    const int64_t nc = ns - c0 < kKcSteps ? ns - c0 : kKcSteps;
                    for (int64_t s = 0; s < nt; s += kTile) {
                        const int T = int(nt - s < kTile ? nt - s : kTile);
                        const uint32_t* xp = xs + s * ns + c0 * T;
                        float* out = y + (t0 + s) * ldy + r;
                        const uint8_t* wc = w + c0 * Elem::kStepBytes;
                        if (two) {
                            tile_n<2>(T, wc, pstride, xp, nc, out, ldy, valid, c0 == 0);
                        } else {
                            tile_n<1>(T, wc, pstride, xp, nc, out, ldy, valid, c0 == 0);
                        }
                    }
                }
            }
        }
    }
};

constexpr PackedMatmulKernel kF32Packed{FloatPacked<PackedElemF32>::packed_bytes, FloatPacked<PackedElemF32>::pack,
                                        FloatPacked<PackedElemF32>::gemm};
constexpr PackedMatmulKernel kF16Packed{FloatPacked<PackedElemF16>::packed_bytes, FloatPacked<PackedElemF16>::pack,
                                        FloatPacked<PackedElemF16>::gemm};
#if defined(__AVX512BF16__)
constexpr PackedMatmulKernel kBF16Packed{FloatPacked<PackedElemBF16>::packed_bytes,
                                         FloatPacked<PackedElemBF16>::pack, FloatPacked<PackedElemBF16>::gemm};
#endif

// The packed float kernels of this AVX-512 level (BF16 where AVX512-BF16 is on); nullptr for other
// types.
inline const PackedMatmulKernel* float_packed_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kF32:
            return &kF32Packed;
        case core::DType::kF16:
            return &kF16Packed;
#if defined(__AVX512BF16__)
        case core::DType::kBF16:  // the avx512-vnni level (with AVX512-BF16) only
            return &kBF16Packed;
#endif
        default:
            return nullptr;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
