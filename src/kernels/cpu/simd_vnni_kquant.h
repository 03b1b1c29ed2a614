// Packed Q4_K weights at the AVX-512 VNNI level (matmul_avx512vnni.cc), ActQ8K activations: lanes =
// rows, as the packed legacy formats (simd_vnni_kernels.h), so a 512-bit vpdpbusd adds 4 products to
// each of 16 rows and no horizontal sum is needed. The row kernel (K4 in simd_kquant_kernels.h) runs
// 1-2 rows at a time with vpmaddubsw / vpmaddwd and reads ~19 GB/s from L3 on two threads.
//
// Layout: rows in groups of 16 (the last group's missing rows repeat its last row); per group and
// 256-element super-block (kSbBytes = 2368, 2.8% more than the 16 rows' 2304 ggml bytes):
//   fp16 d[16] | fp16 dmin[16] | u8 sc[8][16] | u8 m[8][16] | 32 vectors of 64 bytes,
// the 6-bit scales and mins unpacked (sub-block j of row i at [j][i]); vector 8 p + c holds bytes
// 4 c .. 4 c + 3 of row i's qs chunk p (qs[32 p ..]) at bytes 4 i ..: its low nibbles are elements
// 4 c .. 4 c + 3 of sub-block 2 p, its high nibbles the same of sub-block 2 p + 1.
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

#include "kernels/cpu/simd_vnni_kernels.h"

namespace kiln::kernels::cpu {
namespace {

struct VnniQ4K {
    static constexpr int kRows = 16;
    static constexpr int kMaxTokens = 8;
    static constexpr int64_t kSc = 64, kMin = 192, kQs = 320;  // header offsets
    static constexpr int64_t kSbBytes = kQs + 32 * 64;

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(k / blk::kQK_K) * size_t(kSbBytes);
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        const uint8_t* wb = static_cast<const uint8_t*>(w);
        uint8_t* out = static_cast<uint8_t*>(dst);
        const int64_t nsb = k / blk::kQK_K;
        for (int64_t g = 0; g < (rows + kRows - 1) / kRows; ++g) {
            for (int64_t s = 0; s < nsb; ++s, out += kSbBytes) {
                for (int i = 0; i < kRows; ++i) {
                    const int64_t r = g * kRows + i < rows ? g * kRows + i : rows - 1;  // pad: repeat the last row
                    const uint8_t* b = wb + r * int64_t(wrb) + s * int64_t(blk::kQ4_KBytes);
                    std::memcpy(out + 2 * i, b + blk::kQ4_KD, 2);
                    std::memcpy(out + 32 + 2 * i, b + blk::kQ4_KDmin, 2);
                    const uint8_t* q = b + blk::kQ4_KScales;  // 6-bit scales and mins, as dequant.cc
                    for (int j = 0; j < 8; ++j) {
                        const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
                        const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
                        out[kSc + 16 * j + i] = uint8_t(sc);
                        out[kMin + 16 * j + i] = uint8_t(m);
                    }
                    for (int p = 0; p < 4; ++p) {
                        for (int c = 0; c < 8; ++c)
                            std::memcpy(out + kQs + 64 * (8 * p + c) + 4 * i, b + blk::kQ4_KQs + 32 * p + 4 * c, 4);
                    }
                }
            }
        }
    }

    // y[t * ldy + i] for the group's rows i < valid and T tokens; next_group: prefetched (decode).
    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy,
                     int valid, const uint8_t* next_group) {
        constexpr __mmask16 kAll = 0xffff;
        const int64_t nsb = k / blk::kQK_K;
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        __m512 acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
        for (int64_t s = 0; s < nsb; ++s) {
            const uint8_t* g = group + s * kSbBytes;
            if (next_group) avx2_prefetch_next_group(next_group, kSbBytes, s);
            __m512i isum[T];
            for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
            for (int j = 0; j < 8; ++j) {  // sub-block j: chunk j / 2, low nibbles when j is even
                const __m512i sc =
                    _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kSc + 16 * j)));
                __m512i wq[8];
                for (int c = 0; c < 8; ++c) {
                    const __m512i v = _mm512_loadu_si512(g + kQs + 64 * (8 * (j / 2) + c));
                    wq[c] = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(v, 4) : v, m4);
                }
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
                int16_t bs[16];
                std::memcpy(bs, xb + blk::kActQ8KBsums, sizeof(bs));
                __m512i msum = _mm512_setzero_si512();
                for (int q = 0; q < 4; ++q) {  // bsum_j = bsums[2 j] + bsums[2 j + 1] (|.| <= 4064: int16)
                    const uint32_t b0 = uint16_t(int16_t(bs[4 * q] + bs[4 * q + 1]));
                    const uint32_t b1 = uint16_t(int16_t(bs[4 * q + 2] + bs[4 * q + 3]));
                    msum = _mm512_dpwssd_epi32(msum, mp[q], _mm512_set1_epi32(int32_t(b0 | (b1 << 16))));
                }
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8KD, 4);
                const __m512 vdx = _mm512_set1_ps(dx);
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, vdx), _mm512_maskz_cvtepi32_ps(kAll, isum[t]), acc[t]);
                acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, vdx), _mm512_maskz_cvtepi32_ps(kAll, msum), acc[t]);
            }
        }
        for (int t = 0; t < T; ++t) store_rows16(y + t * ldy, acc[t], valid);
    }

    template <int T = kMaxTokens>
    static void tile_n(int num_t, const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, float* y,
                       int64_t ldy, int valid, const uint8_t* next_group) {
        if constexpr (T > 1) {
            if (num_t < T) return tile_n<T - 1>(num_t, group, act, arb, k, y, ldy, valid, next_group);
        }
        tile<T>(group, act, arb, k, y, ldy, valid, next_group);
    }

    // PackedMatmulKernel::gemm (r0 a multiple of 16): group by group, kMaxTokens tokens per tile; a
    // group's first token tile prefetches the next group (it streams from memory).
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        const uint8_t* base = static_cast<const uint8_t*>(packed);
        const uint8_t* ab = static_cast<const uint8_t*>(act);
        const int64_t gbytes = (k / blk::kQK_K) * kSbBytes;
        for (int64_t r = r0; r < r1; r += kRows) {
            const uint8_t* group = base + (r / kRows) * gbytes;
            const int valid = int(r1 - r < kRows ? r1 - r : kRows);
            for (int64_t t = 0; t < n; t += kMaxTokens) {
                const int num_t = int(n - t < kMaxTokens ? n - t : kMaxTokens);
                tile_n(num_t, group, ab + t * int64_t(arb), arb, k, y + t * ldy + r, ldy, valid,
                       t == 0 ? group + gbytes : nullptr);
            }
        }
    }
};

constexpr PackedMatmulKernel kVnniQ4KPacked{VnniQ4K::packed_bytes, VnniQ4K::pack, VnniQ4K::gemm};

}  // namespace
}  // namespace kiln::kernels::cpu
