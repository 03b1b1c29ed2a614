// Packed Q6_K at the AVX-VNNI level (matmul_avxvnni.cc: AVX2 + the VEX-encoded 256-bit vpdpbusd):
// VnniQ6K (simd_vnni_kquant.h) at half the width. Rows in groups of 8, lanes = rows; per group and
// super-block exactly the 8 rows' ggml bytes rearranged (kSbBytes = 1680; pack_q6k_groups<8>,
// simd_vnni_groups.h): fp16 d[8] | int8 sc[16][8] | 32 L vectors | 16 H vectors of 32 bytes.
//
// Arithmetic per (row, token, super-block), as VnniQ6K lane for lane: per 16-element sub-block i the
// exact dot of u = 0..63 with the token's int8 values (4 vpdpbusd over 4 chunks, two chains) times
// sc_i (vpmulld), summed in int32; the -32 offset is taken out as 32 sum_i sc_i bsum_i (8 vpdpwssd
// over the ActQ8K bsums); then acc += (d d_x) total in fp32. Every tile shape runs the same sequence
// per lane: batch invariant, within the 1e-5 bound of the ref kernel (q6_k_block_dot), not the AVX2
// row kernel's bits.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/simd_avxvnni_packed.h"
#include "kernels/cpu/simd_vnni_groups.h"

#if !defined(__AVXVNNI__)
#error "simd_avxvnni_q6k.h needs -mavxvnni"
#endif

namespace kiln::kernels::cpu {
namespace {

struct AvxVnniQ6K {
    static constexpr int kRows = 8;
    // Tokens per tile: 6 ran faster than 4 (tinyllama q6_k pp64 at avx-vnni: 139-141 against 128 tok/s),
    // as for AvxVnniK4.
    static constexpr int kMaxTokens = 6;
    static constexpr int64_t kSc = 16, kL = 144, kH = kL + 32 * 32;  // header offsets
    static constexpr int64_t kSbBytes = kH + 16 * 32;
    static_assert(kSbBytes == 8 * int64_t(blk::kQ6_KBytes));

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(k / blk::kQK_K) * size_t(kSbBytes);
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        pack_q6k_groups<kRows>(w, wrb, rows, k, dst);
    }

    // u of chunk c = 16 Q + m (elements 4 c .. 4 c + 3 of the 8 rows) of the super-block at g.
    template <int Q>
    static __m256i chunk(const uint8_t* g, int m) {
        const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
        const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kL + 32 * (16 * (Q % 2) + m)));
        const __m256i lo = _mm256_and_si256(Q < 2 ? l : _mm256_srli_epi16(l, 4), m4);
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kH + 32 * m));
        __m256i hs = h;  // bits 2 Q .. 2 Q + 1 of H -> bits 4-5
        if constexpr (Q < 2) hs = _mm256_slli_epi16(h, 4 - 2 * Q);
        if constexpr (Q == 3) hs = _mm256_srli_epi16(h, 2);
        return _mm256_or_si256(lo, _mm256_and_si256(hs, m30));
    }

    static __m256i sc8(const uint8_t* p) {  // 8 int8 scales sign-extended to int32
        return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }

    // Sub-blocks 4 Q .. 4 Q + 3 of the super-blocks at g[0 .. G) into isum[G][T].
    template <int Q, int G, int T>
    static void quarter(const uint8_t* const* g, const uint8_t* xs, size_t arb, __m256i (*isum)[T]) {
        for (int ii = 0; ii < 4; ++ii) {
            const int i = 4 * Q + ii;
            for (int gi = 0; gi < G; ++gi) {
                const __m256i sc = sc8(g[gi] + kSc + 8 * i);
                __m256i wq[4];
                for (int c = 0; c < 4; ++c) wq[c] = chunk<Q>(g[gi], 4 * ii + c);
                for (int t = 0; t < T; ++t) {
                    const uint8_t* xq = xs + t * int64_t(arb) + blk::kActQ8KQ + 16 * i;
                    __m256i part[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                    for (int c = 0; c < 4; ++c) {
                        int32_t x4;
                        std::memcpy(&x4, xq + 4 * c, 4);
                        part[c % 2] = dpbusd(part[c % 2], wq[c], _mm256_set1_epi32(x4));
                    }
                    isum[gi][t] =
                        _mm256_add_epi32(isum[gi][t], _mm256_mullo_epi32(_mm256_add_epi32(part[0], part[1]), sc));
                }
            }
        }
    }

    template <int G>
    KILN_PREFETCH_INLINE static void prefetch_next(const uint8_t* next_group, int64_t gbytes, int64_t next_step,
                                                   int64_t s, int part) {
        if (!next_group) return;
        for (int gi = 0; gi < G; ++gi) prefetch_next_group_part(next_group + gi * gbytes, next_step, s, part, 3);
    }

    // y[t * ldy + 8 gi + i] for G consecutive groups (rows i < valid in the last one) and T tokens;
    // next_group / next_step as VnniQ6K::tile (the prefetch in three slices between the quarters).
    template <int G, int T>
    static void tile(const uint8_t* group, int64_t gbytes, const uint8_t* act, size_t arb, int64_t k, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        const int64_t nsb = k / blk::kQK_K;
        __m256 acc[G][T];
        for (int gi = 0; gi < G; ++gi) {
            for (int t = 0; t < T; ++t) acc[gi][t] = _mm256_setzero_ps();
        }
        for (int64_t s = 0; s < nsb; ++s) {
            const uint8_t* g[G];
            for (int gi = 0; gi < G; ++gi) g[gi] = group + gi * gbytes + s * kSbBytes;
            __m256i isum[G][T];
            for (int gi = 0; gi < G; ++gi) {
                for (int t = 0; t < T; ++t) isum[gi][t] = _mm256_setzero_si256();
            }
            const uint8_t* xs = act + s * int64_t(blk::kActQ8KBytes);
            quarter<0, G, T>(g, xs, arb, isum);
            prefetch_next<G>(next_group, gbytes, next_step, s, 0);
            quarter<1, G, T>(g, xs, arb, isum);
            prefetch_next<G>(next_group, gbytes, next_step, s, 1);
            quarter<2, G, T>(g, xs, arb, isum);
            prefetch_next<G>(next_group, gbytes, next_step, s, 2);
            quarter<3, G, T>(g, xs, arb, isum);
            for (int gi = 0; gi < G; ++gi) {
                __m256i scpair[8];  // per lane (sc_2j, sc_2j+1) as int16s
                for (int j = 0; j < 8; ++j) {
                    const __m256i lo = sc8(g[gi] + kSc + 8 * (2 * j)), hi = sc8(g[gi] + kSc + 8 * (2 * j + 1));
                    scpair[j] = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(hi, 16));
                }
                const __m256 d = AvxVnniQ4<FmtQ4_0>::fp16x8(g[gi]);
                for (int t = 0; t < T; ++t) {
                    const uint8_t* xb = act + t * int64_t(arb) + s * int64_t(blk::kActQ8KBytes);
                    __m256i corr = _mm256_setzero_si256();  // sum_i sc_i bsum_i
                    for (int j = 0; j < 8; ++j) {
                        int32_t bpair;  // bsums 2 j, 2 j + 1 as an int16 pair
                        std::memcpy(&bpair, xb + blk::kActQ8KBsums + 4 * j, 4);
                        corr = _mm256_dpwssd_avx_epi32(corr, scpair[j], _mm256_set1_epi32(bpair));
                    }
                    const __m256i total = _mm256_sub_epi32(isum[gi][t], _mm256_slli_epi32(corr, 5));
                    float dx;
                    std::memcpy(&dx, xb + blk::kActQ8KD, 4);
                    acc[gi][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(total),
                                                 acc[gi][t]);
                }
            }
        }
        for (int gi = 0; gi < G; ++gi) {
            for (int t = 0; t < T; ++t) store_rows8(y + t * ldy + kRows * gi, acc[gi][t], gi + 1 == G ? valid : kRows);
        }
    }

    // PackedMatmulKernel::gemm (r0 a multiple of kRows): q6k_groups_gemm (simd_vnni_groups.h).
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        q6k_groups_gemm<AvxVnniQ6K>(packed, act, arb, n, k, y, ldy, r0, r1);
    }
};

constexpr PackedMatmulKernel kAvxVnniQ6KPacked{AvxVnniQ6K::packed_bytes, AvxVnniQ6K::pack, AvxVnniQ6K::gemm,
                                               "8-row AVX-VNNI super-block groups"};

}  // namespace
}  // namespace kiln::kernels::cpu
