// Packed float-valued weights at the AVX-512 levels (matmul_avx512.cc, matmul_avx512vnni.cc): F32,
// F16, the FP8 block formats E4M3_B32 and MXFP8 (f32 activations), and BF16 (bf16 activations; at
// avx512-vnni only, which includes AVX512-BF16). An outer-product GEMM in the manner of BLAS
// microkernels, instead of the row-dot tiles of Float / Fp8 (simd_legacy_kernels.h,
// simd_fp8_kernels.h) and Bf16Dot (simd_vnni_kernels.h), whose horizontal sums and activation
// loads per row tile cap prefill well below the FMA / vdpbf16ps peak; for FP8 the decode of each
// weight is also shared by all the tile's tokens.
//
// Layout (PackedMatmulKernel, matmul.h): rows in panels of 16 (one zmm), each panel a sequence of
// steps: one column (F32, F16: 16 values, 64 / 32 bytes; FP8: 16 codes) or one pair of columns
// (BF16: lane r holds row r's columns 2s, 2s + 1; 64 bytes). F32 / F16: element (r, c) at panel
// r / 16, offset (c * 16 + r % 16) elements. FP8: per 32 columns the 16 rows' block scales (16 fp32
// for E4M3_B32, 16 E8M0 bytes for MXFP8), then the 32 steps. The last panel's missing rows (and
// BF16's odd last column) are zeros.
//
// Arithmetic: per (row, token), columns are taken in blocks of kKc = 256; within a block one fp32
// chain in column order starting from zero (an fma per column, or a vdpbf16ps per pair: both exact
// products added, denormals flushed, as Bf16Dot; FP8: the weight decoded exactly to e4m3 * 2^-8,
// times its block scale, then the fma); the block sums (FP8: times 2^8) are added to y in block
// order (y = block 0, then y += block 1, ...). Every tile shape (1 to 4 panels x 1 token, 1 or 2
// panels x 2..12 tokens), row range and token count runs exactly that sequence per output, so
// results are batch invariant and independent of the thread split. They are not the bits of the unpacked kernels (another summation
// order); all are within the 1e-5 bound of sum |w x| against the ref kernel (kernels/cpu/matmul.h).
//
// Tiles: 2 panels (32 rows) x 12 tokens = 24 zmm accumulators (a lone token: up to 4 panels, 4
// independent chains); per step, 12 broadcasts of the
// tokens' step values (an f32, or a bf16 pair) and 2 weight loads (FP8: 2 decodes) feed 24 FMAs /
// vdpbf16ps. Tokens are packed per call, step-major in tiles of up to 12 (value c of token t at
// c * T + t), 48 at a time (a thread-local buffer that grows once); a single token (decode) is read
// in place. Loop order per 48 tokens: 32-row block, then column block, then token tile, so the
// weight block (32 x 256 columns: 32 KiB f32) stays in L1 while every tile uses it.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/block_layouts.h"

#if !defined(__AVX512F__)
#error "simd_float_packed.h needs -mavx512f"
#endif

namespace kiln::kernels::cpu {
namespace {

namespace blk = blocks;

// Element policies. A step is one column (F32, F16, FP8) or one pair of columns (BF16: vdpbf16ps
// takes two per 32-bit lane). kStepBytes: one step of one panel; kActBytes: one activation element;
// kBlockSteps: steps per scale block (0: no scales); kOutScale: applied to each block sum (the FP8
// decode's 2^-8). panel_bytes(k): one panel; codes(panel, c): step c, followed by the rest of its
// scale block; scales(panel, c): the 16 rows' scales of the block holding step c; pack_row: one row
// into lane `lane` of its panel (zeroed before). madd(acc, w, sc, x): acc + the step's product(s)
// of the panel's 16 rows (times sc where there are scales) with the token's step value x (the
// activation's bits: an f32, or two bf16).
template <size_t kElemBytes, int kStepCols>
struct PackedPlain {
    static constexpr int kStep = kStepCols;
    static constexpr int64_t kStepBytes = 16 * int64_t(kElemBytes) * kStepCols, kBlockSteps = 0;
    static constexpr float kOutScale = 1.0f;
    static int64_t panel_bytes(int64_t k) { return (k + kStep - 1) / kStep * kStepBytes; }
    static const uint8_t* codes(const uint8_t* panel, int64_t c) { return panel + c * kStepBytes; }
    static __m512 scales(const uint8_t*, int64_t) { return _mm512_setzero_ps(); }
    static void pack_row(const uint8_t* row, uint8_t* panel, int lane, int64_t k) {
        for (int64_t c = 0; c < k; ++c) {
            std::memcpy(panel + (c / kStep) * kStepBytes + (lane * kStep + c % kStep) * int64_t(kElemBytes),
                        row + c * int64_t(kElemBytes), kElemBytes);
        }
    }
};
struct PackedElemF32 : PackedPlain<4, 1> {
    static constexpr size_t kActBytes = 4;
    static __m512 madd(__m512 acc, const uint8_t* w, __m512, __m512i x) {
        return _mm512_fmadd_ps(_mm512_loadu_ps(w), _mm512_castsi512_ps(x), acc);
    }
};
// the maskz form of vcvtph2ps: GCC 12 warns that _mm512_cvtph_ps's undefined source is uninitialized
inline __m512 fp16x16_to_ps(__m256i h) {
    return _mm512_maskz_cvtph_ps(__mmask16(0xffff), h);
}
struct PackedElemF16 : PackedPlain<2, 1> {
    static constexpr size_t kActBytes = 4;
    static __m512 madd(__m512 acc, const uint8_t* w, __m512, __m512i x) {
        const __m512 wv = fp16x16_to_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
        return _mm512_fmadd_ps(wv, _mm512_castsi512_ps(x), acc);
    }
};
#if defined(__AVX512BF16__)
// BF16 weights x bf16 activations (ActFormat::kBF16): lane r of a step holds row r's columns 2s and
// 2s + 1; vdpbf16ps adds both exact products to the lane's sum (denormals flushed, as Bf16Dot).
struct PackedElemBF16 : PackedPlain<2, 2> {
    static constexpr size_t kActBytes = 2;
    static __m512 madd(__m512 acc, const uint8_t* w, __m512, __m512i x) {
        return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w), (__m512bh)x);
    }
};
#endif
// FP8 E4M3 rows in 32-column blocks with a scale each (E4M3_B32: fp32; MXFP8: E8M0), f32
// activations. Per panel and block: the 16 rows' scales (16 fp32, or 16 E8M0 bytes), then 32 steps
// of 16 codes. A step's codes decode as simd_fp8_kernels.h does (the fp16 number e4m3 * 2^-8,
// exact), times the row's block scale (one rounding), then one FMA per token; the 2^8 is applied
// to each 256-column block sum (exact: a power of two).
template <bool kMx>
struct PackedElemFp8 {
    static constexpr int kStep = 1;
    static constexpr size_t kActBytes = 4;
    static constexpr int64_t kStepBytes = 16, kBlockSteps = 32, kHeader = kMx ? 16 : 64;
    static constexpr int64_t kBlockBytes = kHeader + kBlockSteps * kStepBytes;
    static constexpr int64_t kSrcBytes = kMx ? int64_t(blk::kMxfp8Bytes) : int64_t(blk::kE4m3B32Bytes);
    static constexpr int64_t kSrcQs = kMx ? int64_t(blk::kMxfp8Qs) : int64_t(blk::kE4m3B32Qs);
    static constexpr float kOutScale = 256.0f;
    static int64_t panel_bytes(int64_t k) { return k / kBlockSteps * kBlockBytes; }
    static const uint8_t* codes(const uint8_t* panel, int64_t c) {
        return panel + (c / kBlockSteps) * kBlockBytes + kHeader + (c % kBlockSteps) * kStepBytes;
    }
    static __m512 scales(const uint8_t* panel, int64_t c) {
        const uint8_t* h = panel + (c / kBlockSteps) * kBlockBytes;
        if constexpr (kMx) {  // 2^(e - 127); e = 0: the subnormal 2^-127 (as E8m0Table)
            // maskz forms: GCC 12 warns that the plain intrinsics' undefined sources are uninitialized
            constexpr __mmask16 kAll = 0xffff;
            const __m512i e = _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
            return _mm512_castsi512_ps(_mm512_maskz_max_epi32(kAll, _mm512_maskz_slli_epi32(kAll, e, 23),
                                                              _mm512_set1_epi32(0x00400000)));
        } else {
            return _mm512_loadu_ps(h);
        }
    }
    static void pack_row(const uint8_t* row, uint8_t* panel, int lane, int64_t k) {
        for (int64_t b = 0; b < k / kBlockSteps; ++b) {
            const uint8_t* src = row + b * kSrcBytes;
            uint8_t* dst = panel + b * kBlockBytes;
            if constexpr (kMx) {
                dst[lane] = src[blk::kMxfp8E];
            } else {
                std::memcpy(dst + 4 * lane, src + blk::kE4m3B32D, 4);
            }
            for (int64_t j = 0; j < kBlockSteps; ++j) dst[kHeader + j * kStepBytes + lane] = src[kSrcQs + j];
        }
    }
    static __m512 madd(__m512 acc, const uint8_t* w, __m512 sc, __m512i x) {
        __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
        v = _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(int16_t(0xBFFF)));
        return _mm512_fmadd_ps(_mm512_mul_ps(fp16x16_to_ps(v), sc), _mm512_castsi512_ps(x), acc);
    }
};

template <class Elem>
struct FloatPacked {
    static constexpr int kPanel = 16;    // rows per panel (one zmm)
    static constexpr int kTile = 12;     // tokens per tile
    static constexpr int kChunk = 48;    // tokens packed per pass
    static constexpr int64_t kKc = 256;  // columns per block (a multiple of every kStep)

    static int64_t steps(int64_t k) { return (k + Elem::kStep - 1) / Elem::kStep; }

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kPanel - 1) / kPanel) * size_t(Elem::panel_bytes(k));
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        const uint8_t* src = static_cast<const uint8_t*>(w);
        uint8_t* out = static_cast<uint8_t*>(dst);
        std::memset(out, 0, packed_bytes(rows, k));  // padding rows (zero scales too), BF16's odd column
        for (int64_t r = 0; r < rows; ++r)
            Elem::pack_row(src + r * int64_t(wrb), out + (r / kPanel) * Elem::panel_bytes(k), int(r % kPanel), k);
    }

    // y[t * ldy + r] (+)= the dot over steps [c0, c0 + ns) for P panels at w (stride pstride bytes)
    // x T tokens; xp: token t's value of step c0 + c at xp[c * T + t]; valid: rows of the last panel.
    template <int P, int T>
    static void tile(const uint8_t* w, int64_t pstride, const uint32_t* xp, int64_t c0, int64_t ns, float* y,
                     int64_t ldy, int valid, bool first) {
        __m512 acc[P][T];
        for (int p = 0; p < P; ++p) {
            for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
        }
        constexpr int64_t kSub = Elem::kBlockSteps > 0 ? Elem::kBlockSteps : kKc;  // steps sharing scales
        for (int64_t b = 0; b < ns; b += kSub) {
            const int64_t e = ns - b < kSub ? ns : b + kSub;
            const uint8_t* cp[P];
            __m512 sc[P];
            for (int p = 0; p < P; ++p) {
                cp[p] = Elem::codes(w + p * pstride, c0 + b);
                sc[p] = Elem::scales(w + p * pstride, c0 + b);
            }
            for (int64_t c = b; c < e; ++c) {
                if constexpr (T == 1) {  // decode: each panel's stream 4 KiB ahead into L1, a line at a time
                    constexpr int64_t kPerLine = Elem::kStepBytes < 64 ? 64 / Elem::kStepBytes : 1;
                    if ((c - b) % kPerLine == 0) {
                        for (int p = 0; p < P; ++p)
                            _mm_prefetch(reinterpret_cast<const char*>(cp[p] + (c - b) * Elem::kStepBytes + 4096),
                                         _MM_HINT_T0);
                    }
                }
                for (int t = 0; t < T; ++t) {
                    const __m512i xv = _mm512_set1_epi32(int(xp[c * T + t]));
                    for (int p = 0; p < P; ++p)
                        acc[p][t] = Elem::madd(acc[p][t], cp[p] + (c - b) * Elem::kStepBytes, sc[p], xv);
                }
            }
        }
        for (int p = 0; p < P; ++p) {
            const int rows = p + 1 < P ? kPanel : valid;
            const __mmask16 m = rows >= kPanel ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
            for (int t = 0; t < T; ++t) {
                float* out = y + t * ldy + p * kPanel;
                __m512 v = acc[p][t];
                if constexpr (Elem::kOutScale != 1.0f) v = _mm512_mul_ps(v, _mm512_set1_ps(Elem::kOutScale));
                if (!first) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out), v);
                _mm512_mask_storeu_ps(out, m, v);
            }
        }
    }

    template <int P, int T = kTile>
    static void tile_n(int num_t, const uint8_t* w, int64_t pstride, const uint32_t* xp, int64_t c0, int64_t ns,
                       float* y, int64_t ldy, int valid, bool first) {
        if constexpr (T > 1) {
            if (num_t < T) return tile_n<P, T - 1>(num_t, w, pstride, xp, c0, ns, y, ldy, valid, first);
        }
        tile<P, T>(w, pstride, xp, c0, ns, y, ldy, valid, first);
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
        const int64_t ns = steps(k), pstride = Elem::panel_bytes(k), kKcSteps = kKc / Elem::kStep;
        if (k == 0) {  // empty rows: the dot is 0
            for (int64_t t = 0; t < n; ++t) std::fill(y + t * ldy + r0, y + t * ldy + r1, 0.0f);
            return;
        }
        // Packed tokens: small batches (decode) on the stack, so a worker's first batch allocates
        // nothing; larger chunks in a per-thread buffer grown to the largest seen.
        constexpr int64_t kStackWords = 16384;  // 64 KiB: e.g. 2 tokens of k = 8192 f32
        uint32_t stack_buf[kStackWords];
        thread_local std::vector<uint32_t> xbuf;
        for (int64_t t0 = 0; t0 < n; t0 += kChunk) {
            const int64_t nt = n - t0 < kChunk ? n - t0 : kChunk;
            const uint8_t* a0 = ab + t0 * int64_t(arb);
            const uint32_t* xs;
            if (nt == 1 && k % Elem::kStep == 0 && reinterpret_cast<uintptr_t>(a0) % 4 == 0) {
                xs = reinterpret_cast<const uint32_t*>(a0);  // one token: its row is the step values in order
            } else {
                uint32_t* dst = stack_buf;
                if (nt * ns > kStackWords) {
                    if (xbuf.size() < size_t(nt * ns)) xbuf.resize(size_t(nt * ns));
                    dst = xbuf.data();
                }
                pack_tokens(a0, arb, nt, k, dst);
                xs = dst;
            }
            // 2 panels per tile, 4 for a lone token (decode: 4 independent chains per column step)
            const int64_t max_panels = nt == 1 ? 4 : 2;
            for (int64_t r = r0; r < r1; r += max_panels * kPanel) {
                const uint8_t* w = base + (r / kPanel) * pstride;
                const int64_t left = r1 - r;
                const int np = int(left >= max_panels * kPanel ? max_panels : (left + kPanel - 1) / kPanel);
                const int valid = int(left - (np - 1) * kPanel < kPanel ? left - (np - 1) * kPanel : kPanel);
                for (int64_t c0 = 0; c0 < ns; c0 += kKcSteps) {
                    const int64_t nc = ns - c0 < kKcSteps ? ns - c0 : kKcSteps;
                    for (int64_t s = 0; s < nt; s += kTile) {
                        const int T = int(nt - s < kTile ? nt - s : kTile);
                        const uint32_t* xp = xs + s * ns + c0 * T;
                        float* out = y + (t0 + s) * ldy + r;
                        switch (np) {
                            case 4:
                                tile<4, 1>(w, pstride, xp, c0, nc, out, ldy, valid, c0 == 0);
                                break;
                            case 3:
                                tile<3, 1>(w, pstride, xp, c0, nc, out, ldy, valid, c0 == 0);
                                break;
                            case 2:
                                tile_n<2>(T, w, pstride, xp, c0, nc, out, ldy, valid, c0 == 0);
                                break;
                            default:
                                tile_n<1>(T, w, pstride, xp, c0, nc, out, ldy, valid, c0 == 0);
                        }
                    }
                }
            }
        }
    }
};

constexpr PackedMatmulKernel kF32Packed{FloatPacked<PackedElemF32>::packed_bytes, FloatPacked<PackedElemF32>::pack,
                                        FloatPacked<PackedElemF32>::gemm, "16-row float panels"};
constexpr PackedMatmulKernel kF16Packed{FloatPacked<PackedElemF16>::packed_bytes, FloatPacked<PackedElemF16>::pack,
                                        FloatPacked<PackedElemF16>::gemm, "16-row fp16 panels"};
constexpr PackedMatmulKernel kE4m3B32Packed{FloatPacked<PackedElemFp8<false>>::packed_bytes,
                                            FloatPacked<PackedElemFp8<false>>::pack,
                                            FloatPacked<PackedElemFp8<false>>::gemm, "16-row fp8 panels"};
constexpr PackedMatmulKernel kMxfp8Packed{FloatPacked<PackedElemFp8<true>>::packed_bytes,
                                          FloatPacked<PackedElemFp8<true>>::pack,
                                          FloatPacked<PackedElemFp8<true>>::gemm, "16-row fp8 panels"};
#if defined(__AVX512BF16__)
constexpr PackedMatmulKernel kBF16Packed{FloatPacked<PackedElemBF16>::packed_bytes, FloatPacked<PackedElemBF16>::pack,
                                         FloatPacked<PackedElemBF16>::gemm, "16-row bf16 pair panels"};
#endif

// The packed float kernels of this AVX-512 level (BF16 where AVX512-BF16 is on); nullptr for other
// types.
inline const PackedMatmulKernel* float_packed_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kF32:
            return &kF32Packed;
        case core::DType::kF16:
            return &kF16Packed;
        case core::DType::kE4m3B32:
            return &kE4m3B32Packed;
        case core::DType::kMxfp8:
            return &kMxfp8Packed;
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
