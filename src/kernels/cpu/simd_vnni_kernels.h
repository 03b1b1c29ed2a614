// Kernels of the AVX-512 VNNI (+ BF16) build only (matmul_avx512vnni.cc): BF16 weights by vdpbf16ps
// (Bf16Dot, at the end), and packed Q8_0 / MXFP4 / NVFP4 kernels: weights repacked at load so that
// one 512-bit vpdpbusd computes 4 elements of 16 rows at once (lane i = row i) and no horizontal
// reduction is needed (llama.cpp's q4_0_8x8 repacking idea, kiln's own layout). MXFP4 / NVFP4
// (VnniMxfp4, VnniNvfp4 below): nibble codes of E2M1 values, mapped in the kernel through Fp4's
// table to 2 e2m1 + 12; header = the 16 rows' E8M0 bytes (MXFP4) or their fp16 scales of both
// 16-element halves (NVFP4, whose halves are separate vpdpbusd chains). Q4_0 and Q4_1 have a 32-row
// layout of their own (simd_vnni_q4.h), which the table lookup of the fp4 codes rules out here.
//
// Layout (PackedMatmulKernel, matmul.h): rows in groups of 16 (the last group's missing rows repeat
// its last row), per group and 32-element block {header; payload}:
//  - MXFP4 / NVFP4: four 64-byte vectors P_j (j = 0..3), byte 4 i + p of P_j = the codes of row i's
//    elements 4 j + p (low nibble) and 16 + 4 j + p (high nibble). P_j & 0xf is chunk j (elements
//    4 j .. 4 j + 3 of the 16 rows), (P_j >> 4) & 0xf chunk j + 4.
//  - Q8_0: eight 64-byte vectors, byte 4 i + p of vector j = q[4 j + p] of row i XOR 0x80 (q + 128 as
//    an unsigned byte).
// The same bytes per block as the ggml layout (16 blocks per group-block). zmm rather than two ymm
// tiles: the tiles are bound by instruction issue (per block and token 8 vpdpbusd, 8 broadcasts
// and the scaling), which a 512-bit lane-for-lane version halves.
//
// Arithmetic: per block and token, acc = -offset * sum(x_q) (offset 128 for Q8_0, 12 for the fp4
// codes; the sums are computed once per call for every token and block), then for chunk j
// acc = vpdpbusd(acc, W_j, broadcast(x_q[4 j .. 4 j + 3])): lane i ends as the exact int32 dot of row
// i's block with the activation block, the same integer block_dots8 gives; scaling and accumulation
// are Legacy::tile8's / Fp4's (acc += (d_w * d_x) * idot by fma), so the results are
// bit-identical to the unpacked kernel and to the other packed layouts of this ISA, and batch
// invariant (decode, prefill and remainder rows run the same lane operations).
#pragma once

#include <immintrin.h>

#include <new>

#include "kernels/cpu/simd_fp4_kernels.h"
#include "kernels/cpu/simd_legacy_kernels.h"
#include "kernels/cpu/simd_vnni_groups.h"

#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__) || !defined(__AVX512BF16__)
#error "simd_vnni_kernels.h needs -mavx512vnni -mavx512vl -mavx512bf16"
#endif

namespace kiln::kernels::cpu {
namespace {

// 512-bit helpers. vpdpbusd as tied inline asm (as dpbusd() in simd_avx2.h: GCC 12 copies the
// accumulators of unrolled tiles around the intrinsic); the maskz conversions because GCC 12 warns
// that the plain intrinsics' undefined pass-through sources are uninitialized.
inline __m512i dpbusd512(__m512i acc, __m512i u, __m512i s) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}
inline __m512 vnni_fp16x16(const uint8_t* p) {
    return _mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// y[0 .. valid) = the first valid lanes of v.
inline void store_rows16(float* y, __m512 v, int valid) {
    _mm512_mask_storeu_ps(y, valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << valid) - 1), v);
}

// Per-format traits of the VNNI packed layout. kUnitBytes: source bytes per row and 32 elements;
// kHeader: scale bytes per group-block; kNibbles: payload as 4 nibble vectors (else 8 byte vectors);
// kLut: nibble codes mapped through blk::kE2M1x2 + 12; kOffset: the unsigned weight offset;
// kHalves: two scales per 32 elements (elements 0-15 = chunks 0-3, 16-31 = chunks 4-7).
// codes(unit, c): the 32 unsigned payload values of one row's unit in element order (nibble codes, or
// q ^ 0x80); header(unit, i, h): row i's scale bytes into the group-block header h; scales(h, ...):
// the 16 rows' fp32 scales (d0, and d1 = the second half's scale); mult(d, dx): the multiplier of
// the int32 dot, as the unpacked kernel computes it (bit-identity).
struct VnniQ8 {
    static constexpr int64_t kUnitBytes = int64_t(blk::kQ8_0Bytes);
    static constexpr int64_t kHeader = 32;
    static constexpr bool kNibbles = false, kLut = false, kHalves = false;
    static constexpr int kOffset = 128;
    static void codes(const uint8_t* unit, uint8_t* c) {
        for (int e = 0; e < 32; ++e) c[e] = uint8_t(unit[blk::kQ8_0Qs + e] ^ 0x80);
    }
    static void header(const uint8_t* unit, int i, uint8_t* h) { std::memcpy(h + 2 * i, unit + blk::kQ8_0D, 2); }
    static void scales(const uint8_t* h, __m512* d0, __m512*) { *d0 = vnni_fp16x16(h); }
    static __m512 mult(__m512 d, float dx) { return _mm512_mul_ps(d, _mm512_set1_ps(dx)); }
};

// MXFP4 (ggml block_mxfp4: E8M0 scale, then qs as Q4_0's) and NVFP4 (two 10-byte blocks {fp16 d;
// 8 bytes: low nibbles elements 0-7, high 8-15} per 32 elements), as Fp4 in simd_fp4_kernels.h.
struct VnniMxfp4 {
    static constexpr int64_t kUnitBytes = int64_t(blk::kMxfp4Bytes);
    static constexpr int64_t kHeader = 16;
    static constexpr bool kNibbles = true, kLut = true, kHalves = false;
    static constexpr int kOffset = kFp4Offset;
    static void codes(const uint8_t* unit, uint8_t* c) {
        const uint8_t* q = unit + blk::kMxfp4Qs;
        for (int e = 0; e < 32; ++e) c[e] = uint8_t((q[e % 16] >> (e < 16 ? 0 : 4)) & 0x0f);
    }
    static void header(const uint8_t* unit, int i, uint8_t* h) { h[i] = unit[blk::kMxfp4E]; }
    static void scales(const uint8_t* h, __m512* d0, __m512*) {  // 2^(e - 127), e = 0 -> 2^-127 (Fp4::e8m0_scales)
        constexpr __mmask16 kAll = 0xffff;
        const __m512i e = _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
        *d0 = _mm512_castsi512_ps(
            _mm512_maskz_max_epi32(kAll, _mm512_maskz_slli_epi32(kAll, e, 23), _mm512_set1_epi32(0x00400000)));
    }
    static __m512 mult(__m512 d, float dx) { return _mm512_mul_ps(d, _mm512_set1_ps(0.5f * dx)); }
};
struct VnniNvfp4 {
    static constexpr int64_t kUnitBytes = 2 * int64_t(blk::kNvfp4Bytes);
    static constexpr int64_t kHeader = 64;
    static constexpr bool kNibbles = true, kLut = true, kHalves = true;
    static constexpr int kOffset = kFp4Offset;
    static void codes(const uint8_t* unit, uint8_t* c) {
        for (int e = 0; e < 32; ++e) {
            const uint8_t* q = unit + (e / 16) * int64_t(blk::kNvfp4Bytes) + blk::kNvfp4Qs;
            c[e] = uint8_t((q[e % 8] >> ((e % 16) < 8 ? 0 : 4)) & 0x0f);
        }
    }
    static void header(const uint8_t* unit, int i, uint8_t* h) {
        std::memcpy(h + 2 * i, unit + blk::kNvfp4D, 2);
        std::memcpy(h + 32 + 2 * i, unit + blk::kNvfp4Bytes + blk::kNvfp4D, 2);
    }
    static void scales(const uint8_t* h, __m512* d0, __m512* d1) {
        *d0 = vnni_fp16x16(h);
        *d1 = vnni_fp16x16(h + 32);
    }
    static __m512 mult(__m512 d, float dx) { return _mm512_mul_ps(d, _mm512_set1_ps(0.5f * dx)); }
};

template <class Fmt>
struct Vnni {
    static constexpr int kRows = 16;
    static constexpr int kMaxTokens = 8;
    static constexpr bool kNibbles = Fmt::kNibbles;
    static constexpr int kOffset = Fmt::kOffset;
    static constexpr int64_t kHeader = Fmt::kHeader;
    static constexpr int64_t kGroupBytes = kRows * Fmt::kUnitBytes;
    static_assert(kHeader + (kNibbles ? 256 : 512) == kGroupBytes);
    // Offsets of (token, block) pairs computed per call on the stack; more goes to the heap.
    static constexpr int64_t kStackOffsets = 8192;
    static constexpr int kOffsPerBlock = Fmt::kHalves ? 2 : 1;

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        vnni_pack_walk<kRows>(w, wrb, rows, k / blk::kQK, Fmt::kUnitBytes, kGroupBytes, dst,
                              [](uint8_t* out, int i, const uint8_t* unit) {
                                  Fmt::header(unit, i, out);
                                  uint8_t c[32];
                                  Fmt::codes(unit, c);
                                  for (int j = 0; j < (kNibbles ? 4 : 8); ++j) {
                                      uint8_t* o = out + kHeader + 64 * j + 4 * i;
                                      for (int p = 0; p < 4; ++p)
                                          o[p] = kNibbles ? uint8_t(c[4 * j + p] | (c[16 + 4 * j + p] << 4))
                                                          : c[4 * j + p];
                                  }
                              });
    }

    // The activation row's offset terms, kOffsPerBlock per block: -kOffset * the sum of the block's
    // 32 int8 values (or of each 16-value half when kHalves).
    static void offsets(const uint8_t* act, int64_t nb, int32_t* off) {
        const __m256i ones = _mm256_set1_epi8(1);
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i xq =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q));
            const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xq);
            if constexpr (Fmt::kHalves) {
                off[2 * b] = -kOffset * avx2_hsum_i32(_mm256_blend_epi32(s, _mm256_setzero_si256(), 0xf0));
                off[2 * b + 1] = -kOffset * avx2_hsum_i32(_mm256_blend_epi32(s, _mm256_setzero_si256(), 0x0f));
            } else {
                off[b] = -kOffset * avx2_hsum_i32(s);
            }
        }
    }

    // y[t * ldy + i] for the group's rows i < valid and T tokens at act (row stride arb); off: the T
    // tokens' offsets, token t at off + t * nb * kOffsPerBlock. next_group: prefetched block by block,
    // next_step bytes a block (vnni_tile_prefetch).
    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, const int32_t* off, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        const int64_t nb = k / blk::kQK;
        constexpr bool kTwoAcc = Fmt::kHalves;
        __m512 acc[T], acc1[T];  // acc1: the second half (kHalves)
        for (int t = 0; t < T; ++t) {
            acc[t] = _mm512_setzero_ps();
            acc1[t] = _mm512_setzero_ps();
        }
        __m512i lut = _mm512_setzero_si512();
        if constexpr (Fmt::kLut)
            lut = _mm512_add_epi8(
                _mm512_maskz_broadcast_i32x4(__mmask16(0xffff), _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk::kE2M1x2))),
                _mm512_set1_epi8(kFp4Offset));
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* gb = group + b * kGroupBytes;
            vnni_tile_prefetch<T>(gb, kGroupBytes, next_group, next_step, b);
            __m512i wq[8];
            if constexpr (kNibbles) {
                const __m512i mask = _mm512_set1_epi8(0x0f);
                for (int j = 0; j < 4; ++j) {
                    const __m512i v = _mm512_loadu_si512(gb + kHeader + 64 * j);
                    wq[j] = _mm512_and_si512(v, mask);
                    wq[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
                }
                if constexpr (Fmt::kLut) {
                    for (int j = 0; j < 8; ++j) wq[j] = _mm512_shuffle_epi8(lut, wq[j]);
                }
            } else {
                for (int j = 0; j < 8; ++j) wq[j] = _mm512_loadu_si512(gb + kHeader + 64 * j);
            }
            __m512 d0, d1 = _mm512_setzero_ps();
            Fmt::scales(gb, &d0, &d1);
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes);
                const uint8_t* xq = xb + blk::kActQ8Q;
                const int32_t* o = off + (t * nb + b) * kOffsPerBlock;
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8D, 4);
                auto chunk = [&](__m512i a, int j) {
                    int32_t x4;
                    std::memcpy(&x4, xq + 4 * j, 4);
                    return dpbusd512(a, wq[j], _mm512_set1_epi32(x4));
                };
                // Scaling and accumulation as accumulate_block (simd_legacy_kernels.h), lane for lane.
                if constexpr (Fmt::kHalves) {  // elements 0-15 = chunks 0-3, 16-31 = chunks 4-7
                    __m512i h0 = _mm512_set1_epi32(o[0]), h1 = _mm512_set1_epi32(o[1]);
                    for (int j = 0; j < 4; ++j) {
                        h0 = chunk(h0, j);
                        h1 = chunk(h1, j + 4);
                    }
                    acc[t] = _mm512_fmadd_ps(Fmt::mult(d0, dx), _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), h0), acc[t]);
                    acc1[t] = _mm512_fmadd_ps(Fmt::mult(d1, dx), _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), h1), acc1[t]);
                } else {
                    // independent vpdpbusd chains (exact integers: the split changes nothing): 4
                    // chains of 2 for a lone token (decode), 2 of 4 when other tokens' interleave
                    constexpr int kChains = T == 1 ? 4 : 2;
                    __m512i part[kChains];
                    part[0] = _mm512_set1_epi32(o[0]);
                    for (int c = 1; c < kChains; ++c) part[c] = _mm512_setzero_si512();
                    for (int j = 0; j < 8; ++j) part[j % kChains] = chunk(part[j % kChains], j);
                    __m512i idot = part[0];
                    for (int c = 1; c < kChains; ++c) idot = _mm512_add_epi32(idot, part[c]);
                    acc[t] = _mm512_fmadd_ps(Fmt::mult(d0, dx), _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), idot), acc[t]);
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            __m512 sum = acc[t];
            if constexpr (kTwoAcc) sum = _mm512_add_ps(sum, acc1[t]);
            store_rows16(y + t * ldy, sum, valid);
        }
    }

    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1);
};

template <class Fmt>
void Vnni<Fmt>::gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
    vnni_groups_gemm<Vnni<Fmt>>(packed, act, arb, n, k, y, ldy, r0, r1);
}

// BF16 weights x bf16 activations (ActFormat::kBF16) by vdpbf16ps: per (weight row, token) one
// fp32 accumulator vector, 16 elements (8 pairs) per instruction, a horizontal sum at the end and the
// k % 16 tail by scalar fma; every tile shape runs the same sequence per (row, token), so results are
// batch invariant. vdpbf16ps adds each pair's two exact products in turn (odd element first) with
// round to nearest even and flushes denormal inputs and results to zero; with the ref kernel's exact
// products summed in double, results agree within the 1e-5 bound of sum |w x| (matmul.h).
struct Bf16Dot {
    static constexpr int kDecodeRows = 4;
    static constexpr int kPrefillRows = 4;

    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        __m256 acc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
        }
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            __m256i wv[R];
            for (int r = 0; r < R; ++r)
                wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * int64_t(wrb) + 2 * i));
            for (int t = 0; t < T; ++t) {
                const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + t * int64_t(arb) + 2 * i));
                for (int r = 0; r < R; ++r) acc[r][t] = _mm256_dpbf16_ps(acc[r][t], (__m256bh)wv[r], (__m256bh)xv);
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) {
                float sum = avx2_hsum(acc[r][t]);
                for (int64_t j = i; j < k; ++j) {
                    const __m128 wj = _mm_set_ss(FloatBF16::load1(w + r * int64_t(wrb) + 2 * j));
                    const __m128 xj = _mm_set_ss(FloatBF16::load1(act + t * int64_t(arb) + 2 * j));
                    sum = _mm_cvtss_f32(_mm_fmadd_ss(wj, xj, _mm_set_ss(sum)));
                }
                y[t * ldy + r] = sum;
            }
        }
    }
};

constexpr MatmulKernel kBf16Dot{ActFormat::kBF16, bf16_row_bytes, quantize_bf16, avx2_gemm<Bf16Dot>};

template <class Fmt>
constexpr PackedMatmulKernel kVnniPacked{vnni_groups_bytes<Vnni<Fmt>>, Vnni<Fmt>::pack, Vnni<Fmt>::gemm,
                                         "16-row VNNI groups"};

// The packed kernels of this layout: Q8_0, MXFP4 and NVFP4 (matmul_avx512vnni.cc picks Q4_0 and
// Q4_1's from simd_vnni_q4.h first); the 5-bit formats keep simd_packed_kernel's.
inline const PackedMatmulKernel* vnni_packed_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kQ8_0:
            return &kVnniPacked<VnniQ8>;
        case core::DType::kMxfp4:  // packed at this level only (the AVX2 Fp4 kernels gather the scales)
            return &kVnniPacked<VnniMxfp4>;
        case core::DType::kNvfp4:
            return &kVnniPacked<VnniNvfp4>;
        default:
            return simd_packed_kernel(weight_type);
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
