// The AVX-VNNI level's own packed layouts (matmul_avxvnni.cc: AVX2 + the VEX-encoded 256-bit
// vpdpbusd, CPUs without AVX-512), lanes = rows as the AVX-512 VNNI ones, so no horizontal reduction
// per block. AvxVnniQ4 (Q4_0 / Q4_1): VnniQ4's row-pair layout (simd_vnni_q4.h) at half the
// width. 16 rows per group, rows i and i + 8 sharing each payload byte (pack_q4_row_pairs,
// simd_vnni_groups.h): per group and 32-element block {fp16 d[16]; fp16 m[16] (Q4_1); eight
// 32-byte vectors V_j}, so a vector feeds two vpdpbusd with no shift and no horizontal reduction
// (the AVX2 8-row layout reduces four vectors of row pairs per block and token).
//
// Arithmetic per block and token, as VnniQ4: F = sum_j vpdpbusd(V_j, x4_j) (lane i: dot(c(i), x) +
// 16 dot(c(i + 8), x)) and H = sum_j vpdpbusd(V_j & 0xf0, x4_j) (lane i: 16 dot(c(i + 8), x)),
// started at 17 o and 16 o with o = -kOffset * sum(x), so that rows 0-7 take (17 o + F) - (16 o + H)
// and rows 8-15 (16 o + H) >> 4: the exact block dots of the AVX2 kernel (block_dots8). Scaling and
// accumulation are accumulate_block's lane for lane (acc += (d_w d_x) idot by fma, macc += m_w s_x),
// so results are bit-identical to the avx2 and avx-vnni row kernels and batch invariant.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/simd_legacy_kernels.h"
#include "kernels/cpu/simd_vnni_groups.h"

namespace kiln::kernels::cpu {
namespace {

template <class Fmt>  // FmtQ4_0 or FmtQ4_1 (simd_legacy_kernels.h)
struct AvxVnniQ4 {
    static constexpr int kRows = 16;
    static constexpr int kHalf = 8;
    // Tokens per tile: per token two int32 chains (F, H) live across the block and two float
    // accumulators (four for Q4_1) touched once per block. 4 tokens spill the accumulators from the 16
    // ymm registers and still ran fastest (tinyllama q4_0 pp512 at avx-vnni: 2 tokens 180-185 tok/s,
    // 3 192-194, 4 194-196; docs/performance.md).
    static constexpr int kMaxTokens = 4;
    static constexpr bool kMin = Fmt::kMin;
    static constexpr int kOffset = Fmt::kOffset;
    static constexpr int64_t kHeader = kMin ? 64 : 32;
    static constexpr int64_t kGroupBytes = kRows * int64_t(Fmt::kBytes);
    static_assert(kHeader + 256 == kGroupBytes);
    static constexpr int64_t kStackOffsets = 16384;  // offsets of (token, block) pairs on the stack
    static constexpr int kOffsPerBlock = 2;           // 17 o and 16 o (above)

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        pack_q4_row_pairs<Fmt, kRows>(w, wrb, rows, k, dst);
    }

    // Per block, 17 o and 16 o for o = -kOffset * the sum of its 32 int8 activation values (0 for
    // Q4_1): the F and H chains' starts.
    static void offsets(const uint8_t* act, int64_t nb, int32_t* off) {
        const __m256i ones = _mm256_set1_epi8(1);
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i xq =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q));
            const int32_t o = -kOffset * avx2_hsum_i32(avx2_dot_u8s8(ones, xq));
            off[2 * b] = 17 * o;
            off[2 * b + 1] = 16 * o;
        }
    }

    static __m256 fp16x8(const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }

    // y[t * ldy + i] for the group's rows i < valid and T tokens at act (row stride arb); off: the
    // T tokens' offsets, token t's at off + 2 t nb. next_group: prefetched block by block, next_step
    // bytes a block (vnni_tile_prefetch).
    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, const int32_t* off, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        const int64_t nb = k / blk::kQK;
        const __m256i high = _mm256_set1_epi8(int8_t(0xf0));
        __m256 lo_acc[T], hi_acc[T], lo_min[T], hi_min[T];  // rows 0-7 and 8-15; min terms (Q4_1)
        for (int t = 0; t < T; ++t) {
            lo_acc[t] = hi_acc[t] = _mm256_setzero_ps();
            lo_min[t] = hi_min[t] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* gb = group + b * kGroupBytes;
            vnni_tile_prefetch<T>(gb, kGroupBytes, next_group, next_step, b);
            const uint8_t* payload = gb + kHeader;
            // two chains each for a lone token (vpdpbusd latency), one each when tokens interleave
            constexpr int kChains = T == 1 ? 2 : 1;
            __m256i f[T][kChains], h[T][kChains];
            for (int t = 0; t < T; ++t) {
                f[t][0] = _mm256_set1_epi32(off[2 * (t * nb + b)]);
                h[t][0] = _mm256_set1_epi32(off[2 * (t * nb + b) + 1]);
                if constexpr (kChains == 2) f[t][1] = h[t][1] = _mm256_setzero_si256();
            }
            for (int j = 0; j < 8; ++j) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + 32 * j));
                const __m256i vh = _mm256_and_si256(v, high);
                for (int t = 0; t < T; ++t) {
                    int32_t x4;
                    std::memcpy(&x4, act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q + 4 * j, 4);
                    const __m256i xb = _mm256_set1_epi32(x4);
                    f[t][j % kChains] = dpbusd(f[t][j % kChains], v, xb);
                    h[t][j % kChains] = dpbusd(h[t][j % kChains], vh, xb);
                }
            }
            const __m256 d_lo = fp16x8(gb), d_hi = fp16x8(gb + 16);
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes);
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8D, 4);
                __m256i fs = f[t][0], hs = h[t][0];
                if constexpr (kChains == 2) {
                    fs = _mm256_add_epi32(fs, f[t][1]);
                    hs = _mm256_add_epi32(hs, h[t][1]);
                }
                const __m256i lo = _mm256_sub_epi32(fs, hs);  // o + F - H
                const __m256i hi = _mm256_srai_epi32(hs, 4);   // o + H / 16
                const __m256 vdx = _mm256_set1_ps(dx);
                // as accumulate_block (simd_legacy_kernels.h), lane for lane
                lo_acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d_lo, vdx), _mm256_cvtepi32_ps(lo), lo_acc[t]);
                hi_acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d_hi, vdx), _mm256_cvtepi32_ps(hi), hi_acc[t]);
                if constexpr (kMin) {
                    float sx;
                    std::memcpy(&sx, xb + blk::kActQ8S, 4);
                    const __m256 vsx = _mm256_set1_ps(sx);
                    lo_min[t] = _mm256_fmadd_ps(fp16x8(gb + 32), vsx, lo_min[t]);
                    hi_min[t] = _mm256_fmadd_ps(fp16x8(gb + 48), vsx, hi_min[t]);
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            __m256 lo = lo_acc[t], hi = hi_acc[t];
            if constexpr (kMin) {
                lo = _mm256_add_ps(lo, lo_min[t]);
                hi = _mm256_add_ps(hi, hi_min[t]);
            }
            store_rows8(y + t * ldy, lo, valid);
            if (valid > kHalf) store_rows8(y + t * ldy + kHalf, hi, valid - kHalf);
        }
    }

    // PackedMatmulKernel::gemm (r0 a multiple of 16): vnni_groups_gemm (simd_vnni_groups.h).
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        vnni_groups_gemm<AvxVnniQ4>(packed, act, arb, n, k, y, ldy, r0, r1);
    }
};

// Q8_0 in 8-row groups, lanes = rows (Vnni<VnniQ8>'s layout at half the width): per group and block
// {fp16 d[8]; eight 32-byte vectors}, byte 4 i + p of vector j = q(i, 4 j + p) ^ 0x80 (unsigned for
// vpdpbusd; the chain starts at -128 sum(x), so it ends at the exact dot). Scaling and accumulation
// as accumulate_block, lane for lane: the avx2 level's bits.
struct AvxVnniQ8 {
    static constexpr int kRows = 8;
    static constexpr int kMaxTokens = 4;
    static constexpr int64_t kHeader = 16;
    static constexpr int64_t kGroupBytes = kRows * int64_t(blk::kQ8_0Bytes);
    static_assert(kHeader + 256 == kGroupBytes);
    static constexpr int64_t kStackOffsets = 16384;
    static constexpr int kOffsPerBlock = 1;

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        vnni_pack_walk<kRows>(w, wrb, rows, k / blk::kQK, int64_t(blk::kQ8_0Bytes), kGroupBytes, dst,
                              [](uint8_t* out, int i, const uint8_t* unit) {
                                  std::memcpy(out + 2 * i, unit + blk::kQ8_0D, 2);
                                  for (int j = 0; j < 8; ++j)
                                      for (int p = 0; p < 4; ++p)
                                          out[kHeader + 32 * j + 4 * i + p] = uint8_t(unit[blk::kQ8_0Qs + 4 * j + p] ^ 0x80);
                              });
    }

    static void offsets(const uint8_t* act, int64_t nb, int32_t* off) {
        const __m256i ones = _mm256_set1_epi8(1);
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i xq =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q));
            off[b] = -128 * avx2_hsum_i32(avx2_dot_u8s8(ones, xq));
        }
    }

    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, const int32_t* off, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        const int64_t nb = k / blk::kQK;
        __m256 acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* gb = group + b * kGroupBytes;
            vnni_tile_prefetch<T>(gb, kGroupBytes, next_group, next_step, b);
            constexpr int kChains = T == 1 ? 2 : 1;  // exact integers: the split changes nothing
            __m256i part[T][kChains];
            for (int t = 0; t < T; ++t) {
                part[t][0] = _mm256_set1_epi32(off[t * nb + b]);
                if constexpr (kChains == 2) part[t][1] = _mm256_setzero_si256();
            }
            for (int j = 0; j < 8; ++j) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kHeader + 32 * j));
                for (int t = 0; t < T; ++t) {
                    int32_t x4;
                    std::memcpy(&x4, act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q + 4 * j, 4);
                    part[t][j % kChains] = dpbusd(part[t][j % kChains], v, _mm256_set1_epi32(x4));
                }
            }
            const __m256 d = AvxVnniQ4<FmtQ4_0>::fp16x8(gb);
            for (int t = 0; t < T; ++t) {
                float dx;
                std::memcpy(&dx, act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8D, 4);
                __m256i idot = part[t][0];
                if constexpr (kChains == 2) idot = _mm256_add_epi32(idot, part[t][1]);
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(idot), acc[t]);
            }
        }
        for (int t = 0; t < T; ++t) store_rows8(y + t * ldy, acc[t], valid);
    }

    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        vnni_groups_gemm<AvxVnniQ8>(packed, act, arb, n, k, y, ldy, r0, r1);
    }
};

// Q4_K / Q5_K in 8-row groups, lanes = rows (VnniK4's layout at half the width, simd_vnni_kquant.h):
// per group and 256-element super-block (kSbBytes = 1184 for Q4_K, 2.8% more than the 8 rows' 1152
// ggml bytes; 1440 for Q5_K, 2.3% more than 1408)
//   fp16 d[8] | fp16 dmin[8] | u8 sc[8][8] | u8 m[8][8] | 32 vectors of 32 bytes | Q5_K: 8 more,
// the 6-bit scales and mins unpacked (sub-block j of row i at [j][i]); vector 8 p + c holds bytes
// 4 c .. 4 c + 3 of row i's qs chunk p at bytes 4 i ..: low nibbles elements 4 c .. of sub-block
// 2 p, high nibbles the same of sub-block 2 p + 1; Q5_K's vector c of the last 8 holds qh[4 c ..
// 4 c + 3] of row i at bytes 4 i .. (bit j: bit 4 of that element of sub-block j). Arithmetic as VnniK4: exact int32 sum_j sc_j dot_j
// (vpdpbusd, vpmulld) and sum_j m_j bsum_j (vpdpwssd against the tokens' int16 pairs, made once per
// call), then acc += (d d_x) sum_sc and acc -= (dmin d_x) sum_min in fp32, super-block by super-block:
// batch invariant, within the 1e-5 bound of the ref kernel (not the AVX2 row kernel's bits).
template <bool kFiveBit>  // false: Q4_K, true: Q5_K
struct AvxVnniK4 {
    static constexpr int kRows = 8;
    // Tokens per tile: 6 ran fastest of 2, 4, 6, 8 (tinyllama q4_k pp64 at avx-vnni: 142-144, 163-177,
    // 184-185, 177-179 tok/s), the per-token sums spilling past the 16 ymm registers beyond that.
    static constexpr int kMaxTokens = 6;
    static constexpr int64_t kSc = 32, kMin = 96, kQs = 160, kQh = kQs + 32 * 32;  // offsets
    static constexpr int64_t kSbBytes = kQh + (kFiveBit ? 8 * 32 : 0);
    static constexpr int64_t kSrcBytes = int64_t(kFiveBit ? blk::kQ5_KBytes : blk::kQ4_KBytes);
    static constexpr size_t kSrcScales = kFiveBit ? blk::kQ5_KScales : blk::kQ4_KScales;
    static constexpr size_t kSrcQs = kFiveBit ? blk::kQ5_KQs : blk::kQ4_KQs;

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(k / blk::kQK_K) * size_t(kSbBytes);
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        vnni_pack_walk<kRows>(w, wrb, rows, k / blk::kQK_K, kSrcBytes, kSbBytes, dst,
                              [](uint8_t* out, int i, const uint8_t* b) {
            std::memcpy(out + 2 * i, b + blk::kQ4_KD, 2);
            std::memcpy(out + 16 + 2 * i, b + blk::kQ4_KDmin, 2);
            const uint8_t* q = b + kSrcScales;  // 6-bit scales and mins, as dequant.cc
            for (int j = 0; j < 8; ++j) {
                out[kSc + 8 * j + i] = uint8_t(j < 4 ? q[j] & 63 : (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
                out[kMin + 8 * j + i] = uint8_t(j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4));
            }
            for (int p = 0; p < 4; ++p)
                for (int c = 0; c < 8; ++c)
                    std::memcpy(out + kQs + 32 * (8 * p + c) + 4 * i, b + kSrcQs + 32 * p + 4 * c, 4);
            if constexpr (kFiveBit) {  // vector c: qh[4 c .. 4 c + 3] of row i at bytes 4 i ..
                for (int c = 0; c < 8; ++c) std::memcpy(out + kQh + 32 * c + 4 * i, b + blk::kQ5_KQh + 4 * c, 4);
            }
        });
    }

    static __m256i u8x8(const uint8_t* p) {  // 8 bytes zero-extended to 8 int32
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }

    // y[t * ldy + i] for the group's rows i < valid and T tokens (min multipliers at mx, laid out as
    // k4_min_multipliers makes them); next_group / next_step as VnniK4::tile.
    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, const int32_t* mx, int64_t k, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group, int64_t next_step) {
        const int64_t nsb = k / blk::kQK_K;
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        __m256 acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; ++s) {
            const uint8_t* g = group + s * kSbBytes;
            __m256i isum[T];
            for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
            for (int j = 0; j < 8; ++j) {  // sub-block j: chunk j / 2, low nibbles when j is even
                if (next_group) prefetch_next_group_part(next_group, next_step, s, j, 8);
                const __m256i sc = u8x8(g + kSc + 8 * j);
                __m256i wq[8];
                for (int c = 0; c < 8; ++c) {
                    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kQs + 32 * (8 * (j / 2) + c)));
                    wq[c] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
                    if constexpr (kFiveBit) {  // bit j of each qh byte to bit 4 (16-bit shifts by <= 4
                        // keep bit 4 of every byte within its byte)
                        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kQh + 32 * c));
                        const __m256i hb = j <= 4 ? _mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - j))
                                                  : _mm256_srl_epi16(h, _mm_cvtsi32_si128(j - 4));
                        wq[c] = _mm256_or_si256(wq[c], _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
                    }
                }
                for (int t = 0; t < T; ++t) {
                    const uint8_t* xq = act + t * int64_t(arb) + s * int64_t(blk::kActQ8KBytes) + blk::kActQ8KQ + 32 * j;
                    __m256i part[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                    for (int c = 0; c < 8; ++c) {
                        int32_t x4;
                        std::memcpy(&x4, xq + 4 * c, 4);
                        part[c % 2] = dpbusd(part[c % 2], wq[c], _mm256_set1_epi32(x4));
                    }
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(_mm256_add_epi32(part[0], part[1]), sc));
                }
            }
            __m256i mp[4];  // per lane (m_2q, m_2q+1) as int16 pairs
            for (int q = 0; q < 4; ++q)
                mp[q] = _mm256_or_si256(u8x8(g + kMin + 8 * (2 * q)), _mm256_slli_epi32(u8x8(g + kMin + 8 * (2 * q + 1)), 16));
            const __m256 d = AvxVnniQ4<FmtQ4_0>::fp16x8(g), dmin = AvxVnniQ4<FmtQ4_0>::fp16x8(g + 16);
            for (int t = 0; t < T; ++t) {
                const int32_t* m = mx + (t * nsb + s) * 4;
                __m256i msum = _mm256_setzero_si256();
                for (int q = 0; q < 4; ++q) msum = _mm256_dpwssd_avx_epi32(msum, mp[q], _mm256_set1_epi32(m[q]));
                float dx;
                std::memcpy(&dx, act + t * int64_t(arb) + s * int64_t(blk::kActQ8KBytes) + blk::kActQ8KD, 4);
                const __m256 vdx = _mm256_set1_ps(dx);
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
                acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(msum), acc[t]);
            }
        }
        for (int t = 0; t < T; ++t) store_rows8(y + t * ldy, acc[t], valid);
    }

    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        k4_groups_gemm<AvxVnniK4>(packed, act, arb, n, k, y, ldy, r0, r1);  // simd_vnni_groups.h
    }
};

constexpr PackedMatmulKernel kAvxVnniQ4KPacked{AvxVnniK4<false>::packed_bytes, AvxVnniK4<false>::pack,
                                               AvxVnniK4<false>::gemm, "8-row AVX-VNNI super-block groups"};
constexpr PackedMatmulKernel kAvxVnniQ5KPacked{AvxVnniK4<true>::packed_bytes, AvxVnniK4<true>::pack,
                                               AvxVnniK4<true>::gemm, "8-row AVX-VNNI super-block groups"};

constexpr PackedMatmulKernel kAvxVnniQ8Packed{vnni_groups_bytes<AvxVnniQ8>, AvxVnniQ8::pack, AvxVnniQ8::gemm,
                                              "8-row AVX-VNNI groups, lanes = rows"};

template <class Fmt>
constexpr PackedMatmulKernel kAvxVnniQ4Packed{vnni_groups_bytes<AvxVnniQ4<Fmt>>, AvxVnniQ4<Fmt>::pack,
                                              AvxVnniQ4<Fmt>::gemm, "16-row AVX-VNNI groups, rows i and i+8 share a byte"};

}  // namespace
}  // namespace kiln::kernels::cpu
