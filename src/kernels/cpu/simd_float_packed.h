// Packed F32 / F16 weights at the AVX-512 levels (matmul_avx512.cc, matmul_avx512vnni.cc): an
// outer-product GEMM in the manner of BLAS microkernels, instead of the row-dot tiles of Float
// (simd_legacy_kernels.h), whose horizontal sums and two loads per FMA cap prefill well below the
// FMA peak.
//
// Layout (PackedMatmulKernel, matmul.h): rows in panels of 16 (one zmm), each panel k-major: element
// (row r, column c) at panel r / 16, offset c * 16 + r % 16 (f32 or fp16 as stored); the last panel's
// missing rows are zeros. Same bytes as the row layout, padded to 16 rows.
//
// Arithmetic: per (row, token), columns are taken in blocks of kKc = 256; within a block one fp32
// fma chain in column order starting from zero; the block sums are added to y in block order
// (y = block 0, then y += block 1, ...). Every tile shape (1 or 2 panels x 1..12 tokens), row range
// and token count runs exactly that sequence per output, so results are batch invariant and
// independent of the thread split. They are not the bits of the unpacked kernel (another summation
// order); both are within the 1e-5 bound of sum |w x| against the ref kernel (kernels/cpu/matmul.h).
//
// Tiles: 2 panels (32 rows) x 12 tokens = 24 zmm accumulators; per column 2 weight loads and 12
// broadcasts of the token's value feed 24 FMAs. Tokens are packed per call, column-major in tiles of
// up to 12 (x[t][c] at c * T + t), 48 at a time (a thread-local buffer that grows once); a single
// token (decode) is read in place. Loop order per 48 tokens: 32-row block, then column block, then
// token tile, so the 32 x 256 weight block (32 KiB f32) stays in L1 while every tile uses it.
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

struct PackedElemF32 {
    static constexpr size_t kBytes = 4;
    static __m512 load16(const uint8_t* p) { return _mm512_loadu_ps(p); }
};
struct PackedElemF16 {
    static constexpr size_t kBytes = 2;
    static __m512 load16(const uint8_t* p) {
        // the maskz form: GCC 12 warns that _mm512_cvtph_ps's undefined source is uninitialized
        return _mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
};

template <class Elem>
struct FloatPacked {
    static constexpr int kPanel = 16;     // rows per panel (one zmm)
    static constexpr int kTile = 12;      // tokens per tile
    static constexpr int kChunk = 48;     // tokens packed per pass
    static constexpr int64_t kKc = 256;   // columns per block
    static constexpr int64_t kPanelElemBytes = kPanel * int64_t(Elem::kBytes);  // one column of a panel

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kPanel - 1) / kPanel) * size_t(kPanel) * size_t(k) * Elem::kBytes;
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        const uint8_t* src = static_cast<const uint8_t*>(w);
        uint8_t* out = static_cast<uint8_t*>(dst);
        std::memset(out, 0, packed_bytes(rows, k));
        for (int64_t r = 0; r < rows; ++r) {
            uint8_t* panel = out + (r / kPanel) * k * kPanelElemBytes + (r % kPanel) * int64_t(Elem::kBytes);
            const uint8_t* row = src + r * int64_t(wrb);
            for (int64_t c = 0; c < k; ++c)
                std::memcpy(panel + c * kPanelElemBytes, row + c * int64_t(Elem::kBytes), Elem::kBytes);
        }
    }

    // y[t * ldy + r] (+)= the column block's dot for P panels (stride pstride bytes) x T tokens; xp:
    // the block's columns, x[t][c] at xp[c * T + t]; valid: rows of the last panel to write.
    template <int P, int T>
    static void tile(const uint8_t* w, int64_t pstride, const float* xp, int64_t kc, float* y, int64_t ldy, int valid,
                     bool first) {
        __m512 acc[P][T];
        for (int p = 0; p < P; ++p) {
            for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
        }
        for (int64_t c = 0; c < kc; ++c) {
            __m512 wv[P];
            for (int p = 0; p < P; ++p) wv[p] = Elem::load16(w + p * pstride + c * kPanelElemBytes);
            for (int t = 0; t < T; ++t) {
                const __m512 xv = _mm512_set1_ps(xp[c * T + t]);
                for (int p = 0; p < P; ++p) acc[p][t] = _mm512_fmadd_ps(wv[p], xv, acc[p][t]);
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
    static void tile_n(int num_t, const uint8_t* w, int64_t pstride, const float* xp, int64_t kc, float* y, int64_t ldy,
                       int valid, bool first) {
        if constexpr (T > 1) {
            if (num_t < T) return tile_n<P, T - 1>(num_t, w, pstride, xp, kc, y, ldy, valid, first);
        }
        tile<P, T>(w, pstride, xp, kc, y, ldy, valid, first);
    }

    // PackedMatmulKernel::gemm; act: f32 rows (ActFormat::kF32); r0 a multiple of 16.
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        const uint8_t* base = static_cast<const uint8_t*>(packed);
        const uint8_t* ab = static_cast<const uint8_t*>(act);
        const int64_t pstride = k * kPanelElemBytes;
        thread_local std::vector<float> xbuf;
        if (k == 0) {  // empty rows: the dot is 0
            for (int64_t t = 0; t < n; ++t) std::fill(y + t * ldy + r0, y + t * ldy + r1, 0.0f);
            return;
        }
        for (int64_t t0 = 0; t0 < n; t0 += kChunk) {
            const int64_t nt = n - t0 < kChunk ? n - t0 : kChunk;
            const float* xs;
            if (nt == 1 && arb % sizeof(float) == 0 && reinterpret_cast<uintptr_t>(ab) % sizeof(float) == 0) {
                xs = reinterpret_cast<const float*>(ab + t0 * int64_t(arb));  // one token: its row is k-major already
            } else {
                if (xbuf.size() < size_t(nt * k)) xbuf.resize(size_t(nt * k));
                for (int64_t s = 0; s < nt; s += kTile) {  // tile s: x[t][c] at s * k + c * T + t
                    const int64_t T = nt - s < kTile ? nt - s : kTile;
                    float* dst = xbuf.data() + s * k;
                    for (int64_t t = 0; t < T; ++t) {
                        const uint8_t* row = ab + (t0 + s + t) * int64_t(arb);
                        for (int64_t c = 0; c < k; ++c) std::memcpy(&dst[c * T + t], row + c * 4, 4);
                    }
                }
                xs = xbuf.data();
            }
            for (int64_t r = r0; r < r1; r += 2 * kPanel) {
                const uint8_t* w = base + (r / kPanel) * pstride;
                const int64_t left = r1 - r;
                const bool two = left > kPanel;
                const int valid = int(two ? (left < 2 * kPanel ? left - kPanel : kPanel) : left);
                for (int64_t c0 = 0; c0 < k; c0 += kKc) {
                    const int64_t kc = k - c0 < kKc ? k - c0 : kKc;
                    for (int64_t s = 0; s < nt; s += kTile) {
                        const int T = int(nt - s < kTile ? nt - s : kTile);
                        const float* xp = xs + s * k + c0 * T;
                        float* out = y + (t0 + s) * ldy + r;
                        const uint8_t* wc = w + c0 * kPanelElemBytes;
                        if (two) {
                            tile_n<2>(T, wc, pstride, xp, kc, out, ldy, valid, c0 == 0);
                        } else {
                            tile_n<1>(T, wc, pstride, xp, kc, out, ldy, valid, c0 == 0);
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

// The packed float kernels of the AVX-512 levels; nullptr for other types.
inline const PackedMatmulKernel* float_packed_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kF32:
            return &kF32Packed;
        case core::DType::kF16:
            return &kF16Packed;
        default:
            return nullptr;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
