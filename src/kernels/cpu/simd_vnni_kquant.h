// Packed Q4_K, Q5_K and Q6_K weights at the AVX-512 VNNI level (matmul_avx512vnni.cc), ActQ8K
// activations: lanes = rows, as the packed legacy formats (simd_vnni_kernels.h), so a 512-bit
// vpdpbusd adds 4 products to each of 16 rows and no horizontal sum is needed. The row kernel (K4 in
// simd_kquant_kernels.h) runs 1-2 rows at a time with vpmaddubsw / vpmaddwd and reads ~19 GB/s from
// L3 on two threads.
//
// Q4_K / Q5_K layout: rows in groups of 16 (the last group's missing rows repeat its last row); per
// group and 256-element super-block (kSbBytes = 2368 for Q4_K, 2.8% more than the 16 rows' 2304
// ggml bytes; 2880 for Q5_K, 2.3% more than 2816):
//   fp16 d[16] | fp16 dmin[16] | u8 sc[8][16] | u8 m[8][16] | 32 vectors of 64 bytes
//   | Q5_K only: 8 vectors of 64 bytes,
// the 6-bit scales and mins unpacked (sub-block j of row i at [j][i]); vector 8 p + c holds bytes
// 4 c .. 4 c + 3 of row i's qs chunk p (qs[32 p ..]) at bytes 4 i ..: its low nibbles are elements
// 4 c .. 4 c + 3 of sub-block 2 p, its high nibbles the same of sub-block 2 p + 1. Q5_K's vector c
// of the last 8 holds qh[4 c .. 4 c + 3] of row i at bytes 4 i ..: bit j of each is bit 4 of that
// element of sub-block j, OR-ed into the nibble before the vpdpbusd.
//
// Arithmetic per (row, token, super-block), as the ref kernel (k4_block_dot): exact int32
// sum_sc = sum_j sc_j * dot_j (dot_j by vpdpbusd, times sc_j by vpmulld) and sum_min = sum_j m_j *
// bsum_j (vpdpwssd over pairs of sub-blocks), then acc += (d d_x) sum_sc and acc -= (dmin d_x)
// sum_min in fp32 (fma, fnmadd); rows' sums over super-blocks in order. Every tile shape runs the
// same per-lane sequence, so results are batch invariant; they are not the row kernel's bits (it
// converts partial sums per 8-lane vector), both within the 1e-5 bound of sum |w x| of the ref.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/simd_vnni_kernels.h"

namespace kiln::kernels::cpu {
namespace {

template <bool kFiveBit>  // false: Q4_K, true: Q5_K
struct VnniK4 {
    static constexpr int kRows = 16;
    static constexpr int kMaxTokens = 8;
    static constexpr int64_t kSc = 64, kMin = 192, kQs = 320, kQh = kQs + 32 * 64;  // offsets
    static constexpr int64_t kSbBytes = kQh + (kFiveBit ? 8 * 64 : 0);
    static constexpr int64_t kSrcBytes = int64_t(kFiveBit ? blk::kQ5_KBytes : blk::kQ4_KBytes);
    static constexpr size_t kSrcScales = kFiveBit ? blk::kQ5_KScales : blk::kQ4_KScales;
    static constexpr size_t kSrcQs = kFiveBit ? blk::kQ5_KQs : blk::kQ4_KQs;
    static_assert(blk::kQ4_KD == blk::kQ5_KD && blk::kQ4_KDmin == blk::kQ5_KDmin);

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(k / blk::kQK_K) * size_t(kSbBytes);
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        vnni_pack_walk<16>(w, wrb, rows, k / blk::kQK_K, kSrcBytes, kSbBytes, dst, [](uint8_t* out, int i, const uint8_t* b) {
            std::memcpy(out + 2 * i, b + blk::kQ4_KD, 2);
            std::memcpy(out + 32 + 2 * i, b + blk::kQ4_KDmin, 2);
            const uint8_t* q = b + kSrcScales;  // 6-bit scales and mins, as dequant.cc
            for (int j = 0; j < 8; ++j) {
                const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
                const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
                out[kSc + 16 * j + i] = uint8_t(sc);
                out[kMin + 16 * j + i] = uint8_t(m);
            }
            for (int p = 0; p < 4; ++p) {
                for (int c = 0; c < 8; ++c)
                    std::memcpy(out + kQs + 64 * (8 * p + c) + 4 * i, b + kSrcQs + 32 * p + 4 * c, 4);
            }
            if constexpr (kFiveBit) {
                for (int c = 0; c < 8; ++c) std::memcpy(out + kQh + 64 * c + 4 * i, b + blk::kQ5_KQh + 4 * c, 4);
            }
        });
    }

    // y[t * ldy + i] for the group's rows i < valid and T tokens (min multipliers at mx, as
    // k4_min_multipliers lays them out for these tokens); next_group: prefetched into L2, next_step bytes
    // a super-block (vnni_next_share).
    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, const int32_t* mx, int64_t k, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        constexpr __mmask16 kAll = 0xffff;
        const int64_t nsb = k / blk::kQK_K;
        const __m512i m4 = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
        __m512 acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
        for (int64_t s = 0; s < nsb; ++s) {
            const uint8_t* g = group + s * kSbBytes;
            __m512i isum[T];
            for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
            for (int j = 0; j < 8; ++j) {  // sub-block j: chunk j / 2, low nibbles when j is even
                if (next_group) prefetch_next_group_part(next_group, next_step, s, j, 8);
                const __m512i sc =
                    _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kSc + 16 * j)));
                __m512i wq[8];
                for (int c = 0; c < 8; ++c) {
                    const __m512i v = _mm512_loadu_si512(g + kQs + 64 * (8 * (j / 2) + c));
                    wq[c] = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(v, 4) : v, m4);
                    if constexpr (kFiveBit) {  // bit j of each qh byte to bit 4 (16-bit shifts by <= 4
                        // keep bit 4 of every byte within its byte)
                        const __m512i h = _mm512_loadu_si512(g + kQh + 64 * c);
                        const __m512i hb = j <= 4 ? _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - j))
                                                  : _mm512_srl_epi16(h, _mm_cvtsi32_si128(j - 4));
                        wq[c] = _mm512_or_si512(wq[c], _mm512_and_si512(hb, bit4));
                    }
                }
#pragma GCC unroll 8  // the tokens unrolled: their sums stay in registers
                for (int t = 0; t < T; ++t) {
                    const uint8_t* xq = act + t * int64_t(arb) + s * int64_t(blk::kActQ8KBytes) + blk::kActQ8KQ + 32 * j;
                    constexpr int kChains = T == 1 ? 4 : 2;  // exact integers: the split changes nothing
                    __m512i part[kChains];
                    for (int c = 0; c < kChains; ++c) part[c] = _mm512_setzero_si512();
                    for (int c = 0; c < 8; ++c) {
                        int32_t x4;
                        std::memcpy(&x4, xq + 4 * c, 4);
                        part[c % kChains] = dpbusd512(part[c % kChains], wq[c], _mm512_set1_epi32(x4));
                    }
                    __m512i dot = part[0];
                    for (int c = 1; c < kChains; ++c) dot = _mm512_add_epi32(dot, part[c]);
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot, sc));
                }
            }
            // mins: per lane (m_2q, m_2q+1) as int16 pairs, times the token's (bsum_2q, bsum_2q+1)
            __m512i mp[4];
            for (int q = 0; q < 4; ++q) {
                const __m512i lo = _mm512_maskz_cvtepu8_epi32(
                    kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kMin + 16 * (2 * q))));
                const __m512i hi = _mm512_maskz_cvtepu8_epi32(
                    kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kMin + 16 * (2 * q + 1))));
                mp[q] = _mm512_or_si512(lo, _mm512_maskz_slli_epi32(kAll, hi, 16));
            }
            const __m512 d = vnni_fp16x16(g), dmin = vnni_fp16x16(g + 32);
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + s * int64_t(blk::kActQ8KBytes);
                const int32_t* m = mx + (t * nsb + s) * 4;
                __m512i msum = _mm512_setzero_si512();
                for (int q = 0; q < 4; ++q) msum = _mm512_dpwssd_epi32(msum, mp[q], _mm512_set1_epi32(m[q]));
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8KD, 4);
                const __m512 vdx = _mm512_set1_ps(dx);
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, vdx), _mm512_maskz_cvtepi32_ps(kAll, isum[t]), acc[t]);
                acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, vdx), _mm512_maskz_cvtepi32_ps(kAll, msum), acc[t]);
            }
        }
        for (int t = 0; t < T; ++t) store_rows16(y + t * ldy, acc[t], valid);
    }

    // PackedMatmulKernel::gemm (r0 a multiple of 16): k4_groups_gemm (simd_vnni_groups.h).
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        k4_groups_gemm<VnniK4>(packed, act, arb, n, k, y, ldy, r0, r1);
    }
};

constexpr PackedMatmulKernel kVnniQ4KPacked{VnniK4<false>::packed_bytes, VnniK4<false>::pack, VnniK4<false>::gemm,
                                            "16-row VNNI super-block groups"};
constexpr PackedMatmulKernel kVnniQ5KPacked{VnniK4<true>::packed_bytes, VnniK4<true>::pack, VnniK4<true>::gemm,
                                            "16-row VNNI super-block groups"};

// Q6_K (ggml block_q6_K: 6-bit values u = 0..63 as a low nibble in ql and 2 high bits in qh, 16
// int8 scales per 16 elements, fp16 d; x = d sc_i (u - 32)). Per group of 16 rows and super-block
// (kSbBytes = 3360, exactly the 16 rows' ggml bytes):
//   fp16 d[16] | int8 sc[16][16] (sub-block i of row i' at [i][i']) | 32 L vectors | 16 H vectors,
// 64 bytes each, with u_r[e] the value of element e of row r: byte 4 r + p of L_m = (u[4 m + p] &
// 15) | (u[128 + 4 m + p] & 15) << 4; of H_m = the high 2 bits of u[4 m + p], u[64 + 4 m + p],
// u[128 + 4 m + p], u[192 + 4 m + p] in bits 0-1, 2-3, 4-5, 6-7. Per sub-block i (elements 16 i ..)
// 4 chunks c = 4 i .. 4 i + 3 are rebuilt as u (nibble of L_{c % 32}, bits 2 (c / 16) of H_{c % 16})
// and go through vpdpbusd; sum_i sc_i dot_i by vpmulld; the -32 offset is taken out as
// 32 sum_i sc_i bsum_i (8 vpdpwssd over the ActQ8K bsums, which are per 16 elements). Then
// acc += (d d_x) total in fp32, as the ref kernel (q6_k_block_dot).
struct VnniQ6K {
    static constexpr int kRows = 16;
    static constexpr int kMaxTokens = 8;
    static constexpr int64_t kSc = 32, kL = 288, kH = kL + 32 * 64;  // header offsets
    static constexpr int64_t kSbBytes = kH + 16 * 64;
    static_assert(kSbBytes == 16 * int64_t(blk::kQ6_KBytes));

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(k / blk::kQK_K) * size_t(kSbBytes);
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        pack_q6k_groups<kRows>(w, wrb, rows, k, dst);  // simd_vnni_groups.h
    }

    // u of chunk c = 16 Q + m (elements 4 c .. 4 c + 3 of the 16 rows) of the super-block at g; Q
    // (the quarter of the super-block) a constant, so the nibble half and the H shift are too.
    template <int Q>
    static __m512i chunk(const uint8_t* g, int m) {
        const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
        const __m512i l = _mm512_loadu_si512(g + kL + 64 * (16 * (Q % 2) + m));
        const __m512i lo = _mm512_and_si512(Q < 2 ? l : _mm512_srli_epi16(l, 4), m4);
        const __m512i h = _mm512_loadu_si512(g + kH + 64 * m);
        __m512i hs = h;  // bits 2 Q .. 2 Q + 1 of H -> bits 4-5
        if constexpr (Q < 2) hs = _mm512_slli_epi16(h, 4 - 2 * Q);
        if constexpr (Q == 3) hs = _mm512_srli_epi16(h, 2);
        return _mm512_or_si512(lo, _mm512_and_si512(hs, m30));
    }

    // Sub-blocks 4 Q .. 4 Q + 3 of the super-blocks at g[0 .. G) (G groups; activation blocks at xs,
    // token t at xs + t * arb) into isum[G][T].
    template <int Q, int G, int T>
    static void quarter(const uint8_t* const* g, const uint8_t* xs, size_t arb, __m512i (*isum)[T]) {
        constexpr __mmask16 kAll = 0xffff;
        for (int ii = 0; ii < 4; ++ii) {
            const int i = 4 * Q + ii;
            for (int gi = 0; gi < G; ++gi) {
                const __m512i sc = _mm512_maskz_cvtepi8_epi32(
                    kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g[gi] + kSc + 16 * i)));
                __m512i wq[4];
                for (int c = 0; c < 4; ++c) wq[c] = chunk<Q>(g[gi], 4 * ii + c);
#pragma GCC unroll 8  // the tokens unrolled: their sums stay in registers
                for (int t = 0; t < T; ++t) {
                    const uint8_t* xq = xs + t * int64_t(arb) + blk::kActQ8KQ + 16 * i;
                    __m512i part[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
                    for (int c = 0; c < 4; ++c) {
                        int32_t x4;
                        std::memcpy(&x4, xq + 4 * c, 4);
                        part[c % 2] = dpbusd512(part[c % 2], wq[c], _mm512_set1_epi32(x4));
                    }
                    isum[gi][t] =
                        _mm512_add_epi32(isum[gi][t], _mm512_mullo_epi32(_mm512_add_epi32(part[0], part[1]), sc));
                }
            }
        }
    }

    // Slice `part` of 3 of the next G groups' super-block s (always inlined: a call would spill the
    // tile's accumulators).
    template <int G>
    KILN_PREFETCH_INLINE static void prefetch_next(const uint8_t* next_group, int64_t gbytes, int64_t next_step,
                                                   int64_t s, int part) {
        if (!next_group) return;
        for (int gi = 0; gi < G; ++gi) prefetch_next_group_part(next_group + gi * gbytes, next_step, s, part, 3);
    }

    // y[t * ldy + 16 gi + i] for G consecutive groups (group gi at group + gi * gbytes; rows i < valid
    // in the last one) and T tokens; next_group: prefetched into L2, next_step bytes a super-block
    // (G groups from there in decode; a pass's share, vnni_next_share, in prefill).
    template <int G, int T>
    static void tile(const uint8_t* group, int64_t gbytes, const uint8_t* act, size_t arb, int64_t k, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        constexpr __mmask16 kAll = 0xffff;
        const int64_t nsb = k / blk::kQK_K;
        __m512 acc[G][T];
        for (int gi = 0; gi < G; ++gi) {
            for (int t = 0; t < T; ++t) acc[gi][t] = _mm512_setzero_ps();
        }
        alignas(64) int32_t scpair[8][16];  // per lane (sc_2j, sc_2j+1) as int16s
        for (int64_t s = 0; s < nsb; ++s) {
            const uint8_t* g[G];
            for (int gi = 0; gi < G; ++gi) g[gi] = group + gi * gbytes + s * kSbBytes;
            __m512i isum[G][T];
            for (int gi = 0; gi < G; ++gi) {
                for (int t = 0; t < T; ++t) isum[gi][t] = _mm512_setzero_si512();
            }
            const uint8_t* xs = act + s * int64_t(blk::kActQ8KBytes);
            // The next groups' super-block prefetched in three slices, before quarters 1, 2 and 3: not
            // at the start, where this super-block's own loads miss L1 (in one burst there, decode ran
            // at 58% of the read probe; so, at 77-80%).
            quarter<0, G, T>(g, xs, arb, isum);
            prefetch_next<G>(next_group, gbytes, next_step, s, 0);
            quarter<1, G, T>(g, xs, arb, isum);
            prefetch_next<G>(next_group, gbytes, next_step, s, 1);
            quarter<2, G, T>(g, xs, arb, isum);
            prefetch_next<G>(next_group, gbytes, next_step, s, 2);
            quarter<3, G, T>(g, xs, arb, isum);
            for (int gi = 0; gi < G; ++gi) {
                for (int j = 0; j < 8; ++j) {
                    const __m512i lo = _mm512_maskz_cvtepi8_epi32(
                        kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g[gi] + kSc + 16 * (2 * j))));
                    const __m512i hi = _mm512_maskz_cvtepi8_epi32(
                        kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g[gi] + kSc + 16 * (2 * j + 1))));
                    const __m512i pair = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xffff)),
                                                         _mm512_maskz_slli_epi32(kAll, hi, 16));
                    _mm512_store_si512(scpair[j], pair);
                }
                const __m512 d = vnni_fp16x16(g[gi]);
                for (int t = 0; t < T; ++t) {
                    const uint8_t* xb = act + t * int64_t(arb) + s * int64_t(blk::kActQ8KBytes);
                    __m512i corr = _mm512_setzero_si512();  // sum_i sc_i bsum_i
                    for (int j = 0; j < 8; ++j) {
                        int32_t bpair;  // bsums 2 j, 2 j + 1 as an int16 pair
                        std::memcpy(&bpair, xb + blk::kActQ8KBsums + 4 * j, 4);
                        corr = _mm512_dpwssd_epi32(corr, _mm512_load_si512(scpair[j]), _mm512_set1_epi32(bpair));
                    }
                    const __m512i total = _mm512_sub_epi32(isum[gi][t], _mm512_maskz_slli_epi32(kAll, corr, 5));
                    float dx;
                    std::memcpy(&dx, xb + blk::kActQ8KD, 4);
                    acc[gi][t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx)),
                                                 _mm512_maskz_cvtepi32_ps(kAll, total), acc[gi][t]);
                }
            }
        }
        for (int gi = 0; gi < G; ++gi) {
            for (int t = 0; t < T; ++t) store_rows16(y + t * ldy + kRows * gi, acc[gi][t], gi + 1 == G ? valid : kRows);
        }
    }

    // PackedMatmulKernel::gemm (r0 a multiple of kRows): q6k_groups_gemm (simd_vnni_groups.h).
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        q6k_groups_gemm<VnniQ6K>(packed, act, arb, n, k, y, ldy, r0, r1);
    }
};

constexpr PackedMatmulKernel kVnniQ6KPacked{VnniQ6K::packed_bytes, VnniQ6K::pack, VnniQ6K::gemm,
                                            "16-row VNNI super-block groups"};

}  // namespace
}  // namespace kiln::kernels::cpu
