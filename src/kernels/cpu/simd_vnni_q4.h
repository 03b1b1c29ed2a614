// Packed Q4_0 / Q4_1 kernel of the AVX-512 VNNI build (matmul_avx512vnni.cc): 32 rows per group,
// rows i and i + 16 sharing each byte, so that one payload vector feeds two vpdpbusd with no shift.
//
// Layout (PackedMatmulKernel, matmul.h): rows in groups of 32 (the last group's missing rows repeat
// its last row), per group and 32-element block {fp16 d[32]; fp16 m[32] (Q4_1 only); payload}: eight
// 64-byte vectors V_j (j = 0..7), byte 4 i + p of V_j = c(i, 4 j + p) | c(i + 16, 4 j + p) << 4, where
// c(r, e) is the 4-bit code of element e of row r. The same bytes per block as the ggml layout (32
// blocks per group-block).
//
// Arithmetic: per block and token, with x4_j = the activation's int8 elements 4 j .. 4 j + 3
// broadcast to every lane,
//   F = sum_j vpdpbusd(V_j, x4_j)        lane i: dot(c(i), x) + 16 dot(c(i + 16), x)
//   H = sum_j vpdpbusd(V_j & 0xf0, x4_j)  lane i: 16 dot(c(i + 16), x)
// so row i's dot is F - H and row i + 16's is H >> 4 (exact: H is a multiple of 16), each plus the
// offset term o = -kOffset * sum(x) (Q4_0; the sums are computed once per call). The chains start
// at 17 o (F) and 16 o (H), so that (17 o + F) - (16 o + H) and (16 o + H) >> 4 carry it with no
// further add, and the broadcasts load straight into the accumulators. Against the 16-row
// layout (simd_vnni_kernels.h) this drops the shift and one of the two masks per payload vector and
// half of the activation broadcasts: the 16-row kernel is bound by those vector instructions, not
// by vpdpbusd, and read memory at 79-89% of the read probe where this one reads at 98-99% (2
// threads, a 75 MB matrix; docs/performance.md). The integer dots are the ones block_dots8 gives and
// scaling and accumulation are Legacy::tile8's (acc += (d_w * d_x) * idot by fma, + m_w * s_x for
// Q4_1), so results are bit-identical to the unpacked kernel and batch invariant.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/simd_legacy_kernels.h"
#include "kernels/cpu/simd_vnni_kernels.h"

namespace kiln::kernels::cpu {
namespace {

template <class Fmt>  // FmtQ4_0 or FmtQ4_1 (simd_legacy_kernels.h)
struct VnniQ4 {
    static constexpr int kRows = 32;
    static constexpr int kHalf = 16;
    // Tokens per tile: per token two float accumulators (four for Q4_1) and two int32 chains stay
    // live across the eight payload vectors; 4 tokens fit the 32 zmm registers for both formats (6
    // for Q4_0 measured no faster in prefill).
    static constexpr int kMaxTokens = 4;
    static constexpr bool kMin = Fmt::kMin;
    static constexpr int kOffset = Fmt::kOffset;
    static constexpr int64_t kHeader = kMin ? 128 : 64;
    static constexpr int64_t kGroupBytes = kRows * int64_t(Fmt::kBytes);
    static_assert(kHeader + 512 == kGroupBytes);
    static constexpr int64_t kStackOffsets = 16384;  // offsets of (token, block) pairs on the stack
    static constexpr int kOffsPerBlock = 2;           // 17 o and 16 o (above)

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        pack_q4_row_pairs<Fmt, kRows>(w, wrb, rows, k, dst);  // simd_vnni_groups.h
    }

    // Per block, 17 o and 16 o for o = -kOffset * the sum of its 32 int8 activation values (0 for
    // Q4_1): the F and H chains' starts.
    static void offsets(const uint8_t* act, int64_t nb, int32_t* off) {
        const __m256i ones = _mm256_set1_epi8(1);
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i xq =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q));
            const int32_t o = -kOffset * avx2_hsum_i32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xq));
            off[2 * b] = 17 * o;
            off[2 * b + 1] = 16 * o;
        }
    }

    // y[t * ldy + i] for the group's rows i < valid and T tokens at act (row stride arb); off: the
    // T tokens' offsets, token t's at off + 2 t nb. next_group: prefetched block by block, next_step
    // bytes a block (vnni_tile_prefetch).
    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, const int32_t* off, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        const int64_t nb = k / blk::kQK;
        const __m512i high = _mm512_set1_epi8(int8_t(0xf0));
        __m512 lo_acc[T], hi_acc[T], lo_min[T], hi_min[T];  // rows 0-15 and 16-31; min terms (Q4_1)
        for (int t = 0; t < T; ++t) {
            lo_acc[t] = hi_acc[t] = _mm512_setzero_ps();
            lo_min[t] = hi_min[t] = _mm512_setzero_ps();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* gb = group + b * kGroupBytes;
            vnni_tile_prefetch<T>(gb, kGroupBytes, next_group, next_step, b);
            const uint8_t* payload = gb + kHeader;
            // F and H of each token: two chains each for a lone token (decode: vpdpbusd latency),
            // one each when other tokens' chains interleave
            constexpr int kChains = T == 1 ? 2 : 1;
            __m512i f[T][kChains], h[T][kChains];
            for (int t = 0; t < T; ++t) {
                f[t][0] = _mm512_set1_epi32(off[2 * (t * nb + b)]);
                h[t][0] = _mm512_set1_epi32(off[2 * (t * nb + b) + 1]);
                if constexpr (kChains == 2) f[t][1] = h[t][1] = _mm512_setzero_si512();
            }
            for (int j = 0; j < 8; ++j) {
                const __m512i v = _mm512_loadu_si512(payload + 64 * j);
                const __m512i vh = _mm512_and_si512(v, high);
                for (int t = 0; t < T; ++t) {
                    int32_t x4;
                    std::memcpy(&x4, act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q + 4 * j, 4);
                    const __m512i xb = _mm512_set1_epi32(x4);
                    f[t][j % kChains] = dpbusd512(f[t][j % kChains], v, xb);
                    h[t][j % kChains] = dpbusd512(h[t][j % kChains], vh, xb);
                }
            }
            const __m512 d_lo = vnni_fp16x16(gb), d_hi = vnni_fp16x16(gb + 32);
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes);
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8D, 4);
                __m512i fs = f[t][0], hs = h[t][0];
                if constexpr (kChains == 2) {
                    fs = _mm512_add_epi32(fs, f[t][1]);
                    hs = _mm512_add_epi32(hs, h[t][1]);
                }
                const __m512i lo = _mm512_sub_epi32(fs, hs);                         // o + F - H
                const __m512i hi = _mm512_maskz_srai_epi32(__mmask16(0xffff), hs, 4);  // o + H / 16
                const __m512 vdx = _mm512_set1_ps(dx);
                // as accumulate_block (simd_legacy_kernels.h), lane for lane
                lo_acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d_lo, vdx), _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), lo), lo_acc[t]);
                hi_acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d_hi, vdx), _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), hi), hi_acc[t]);
                if constexpr (kMin) {
                    float sx;
                    std::memcpy(&sx, xb + blk::kActQ8S, 4);
                    const __m512 vsx = _mm512_set1_ps(sx);
                    lo_min[t] = _mm512_fmadd_ps(vnni_fp16x16(gb + 64), vsx, lo_min[t]);
                    hi_min[t] = _mm512_fmadd_ps(vnni_fp16x16(gb + 96), vsx, hi_min[t]);
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            __m512 lo = lo_acc[t], hi = hi_acc[t];
            if constexpr (kMin) {
                lo = _mm512_add_ps(lo, lo_min[t]);
                hi = _mm512_add_ps(hi, hi_min[t]);
            }
            store_rows16(y + t * ldy, lo, valid);
            if (valid > kHalf) store_rows16(y + t * ldy + kHalf, hi, valid - kHalf);
        }
    }

    // PackedMatmulKernel::gemm (r0 a multiple of 32): vnni_groups_gemm (simd_vnni_kernels.h).
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        vnni_groups_gemm<VnniQ4>(packed, act, arb, n, k, y, ldy, r0, r1);
    }
};

template <class Fmt>
constexpr PackedMatmulKernel kVnniQ4Packed{vnni_groups_bytes<VnniQ4<Fmt>>, VnniQ4<Fmt>::pack, VnniQ4<Fmt>::gemm,
                                           "32-row VNNI groups, rows i and i+16 share a byte"};

}  // namespace
}  // namespace kiln::kernels::cpu
