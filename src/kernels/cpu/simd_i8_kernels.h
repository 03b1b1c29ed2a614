// I8 weights (W8A8 per output channel: plain int8 rows, the row scale applied by ops::Linear) times
// kI8Row activations (the whole token quantized with one scale), for the SIMD matmul TUs
// (matmul_avx2.cc, matmul_avx512.cc, matmul_avx512vnni.cc). Internal linkage, as simd_avx2.h.
//
// Arithmetic (matmul.h): y = d_x * float(dot), dot the exact int32 sum of w_j * q_j over the row, so
// every ISA gives the ref kernel's bits.
//  - I8Dot (unpacked rows, every level): 32 elements per step, |w| (u8) times sign(q, w) (s8) by
//    vpmaddubsw + vpmaddwd (no int16 saturation: |w|, |q| <= 127), or one vpdpbusd at the VNNI
//    levels (avx-vnni, avx512-vnni); int32 accumulators, the k % 32 tail in scalar integers.
//  - VnniI8 (AVX-512 VNNI only, packed at load): rows in groups of 16, per group ceil(k/4) 64-byte
//    vectors, byte 4 i + p of vector c = w[row i][4 c + p] + 128 as u8 (0x80 = 0 past the row end; the
//    last group's missing rows repeat its last row). One 512-bit vpdpbusd per vector and token adds 4
//    products to each row's lane, the accumulator starting at -128 * sum(q) (ActI8Row::sum): no per-block
//    scale and no horizontal sum, only integer adds until the one float multiply at the end.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_legacy_kernels.h"  // store_rows8
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#include "kernels/cpu/simd_vnni_kernels.h"  // dpbusd512, store_rows16 (VnniI8)
#endif

namespace kiln::kernels::cpu {
namespace {

inline size_t i8row_row_bytes(int64_t k) {
    return sizeof(ActI8Row) + size_t(i8_row_padded(k));
}

// The kI8Row quantizer (bit-identical to ref::quantize_row_i8row: the same max, the same correctly
// rounded division, cvtps2dq rounds half to even as nearbyint does).
inline void quantize_i8row(const float* x, void* dst, int64_t k) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
    float amax = avx2_max8(m);
    for (; j < k; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f == 0 ? 1.0f : amax / 127.0f;
    int8_t* q = reinterpret_cast<int8_t*>(static_cast<uint8_t*>(dst) + sizeof(ActI8Row));
    const __m256 dv = _mm256_set1_ps(d);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    __m256i sums = _mm256_setzero_si256();
    j = 0;
    for (; j + 32 <= k; j += 32) {
        __m256i v[4];
        for (int p = 0; p < 4; ++p) {
            const __m256i i = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + j + 8 * p), dv));
            v[p] = _mm256_min_epi32(_mm256_max_epi32(i, lo), hi);
            sums = _mm256_add_epi32(sums, v[p]);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j), avx2_pack_i32_to_i8(v[0], v[1], v[2], v[3]));
    }
    int32_t sum = avx2_hsum_i32(sums);
    for (; j < k; ++j) {
        const float r = std::fmin(127.0f, std::fmax(-127.0f, std::nearbyint(x[j] / d)));
        q[j] = int8_t(r);
        sum += q[j];
    }
    for (; j < i8_row_padded(k); ++j) q[j] = 0;
    const ActI8Row h{d, sum};
    std::memcpy(dst, &h, sizeof(h));
}

// acc + the 8 sums of 4 adjacent u8 x s8 products (exact: every adjacent pair fits int16 here).
inline __m256i i8_dot_acc(__m256i acc, __m256i u, __m256i s) {
#if defined(KILN_VNNI256)
    return dpbusd(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

inline float i8_scale_dot(const uint8_t* act, int32_t dot) {
    float d;
    std::memcpy(&d, act, 4);
    return d * float(dot);
}

// Unpacked rows, avx2_gemm's tile interface (simd_avx2.h).
struct I8Dot {
    static constexpr int kDecodeRows = 4;
#ifdef __AVX512F__
    static constexpr int kPrefillRows = 4;  // 16 int32 accumulators: needs the 32 AVX-512 registers
#else
    static constexpr int kPrefillRows = 2;
#endif

    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        __m256i acc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_si256();
        }
        const uint8_t* q = act + sizeof(ActI8Row);
        int64_t i = 0;
        for (; i + 32 <= k; i += 32) {
            __m256i wv[R], wa[R];
            for (int r = 0; r < R; ++r) {
                wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * int64_t(wrb) + i));
                wa[r] = _mm256_sign_epi8(wv[r], wv[r]);
            }
            for (int t = 0; t < T; ++t) {
                const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + t * int64_t(arb) + i));
                for (int r = 0; r < R; ++r) acc[r][t] = i8_dot_acc(acc[r][t], wa[r], _mm256_sign_epi8(xv, wv[r]));
            }
        }
        for (int r = 0; r < R; ++r) {
            const int8_t* wr = reinterpret_cast<const int8_t*>(w + r * int64_t(wrb));
            for (int t = 0; t < T; ++t) {
                const int8_t* xt = reinterpret_cast<const int8_t*>(q + t * int64_t(arb));
                int32_t dot = avx2_hsum_i32(acc[r][t]);
                for (int64_t j = i; j < k; ++j) dot += int32_t(wr[j]) * xt[j];
                y[t * ldy + r] = i8_scale_dot(act + t * int64_t(arb), dot);
            }
        }
    }
};

constexpr MatmulKernel kI8Dot{ActFormat::kI8Row, i8row_row_bytes, quantize_i8row, avx2_gemm<I8Dot>};

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)

struct VnniI8 {
    static constexpr int kRows = 16;          // rows per group (512-bit lanes)
    static constexpr int kPrefillGroups = 3;  // groups per prefill tile: 24 accumulators + 3 weights + x
    static constexpr int kDecodeGroups = 4;   // groups per decode tile (independent chains)
    static constexpr int kMaxTokens = 8;

    static int64_t group_bytes(int64_t k) { return 64 * ((k + 3) / 4); }

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(group_bytes(k));
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        const uint8_t* wb = static_cast<const uint8_t*>(w);
        uint8_t* out = static_cast<uint8_t*>(dst);
        const int64_t chunks = (k + 3) / 4;
        for (int64_t g = 0; g < (rows + kRows - 1) / kRows; ++g) {
            for (int i = 0; i < kRows; ++i) {
                const int64_t r = g * kRows + i < rows ? g * kRows + i : rows - 1;  // pad: repeat the last row
                const uint8_t* row = wb + r * int64_t(wrb);
                for (int64_t c = 0; c < chunks; ++c) {
                    for (int p = 0; p < 4; ++p) {
                        const int64_t j = 4 * c + p;
                        out[64 * c + 4 * i + p] = j < k ? uint8_t(row[j] ^ 0x80) : uint8_t(0x80);
                    }
                }
            }
            out += group_bytes(k);
        }
    }

    // y[t * ldy + 16 g + i] for G consecutive groups (rows i < valid in the last one) and T tokens;
    // next_lines 64-byte lines from `next` prefetched into L2, spread evenly over the column loop (a
    // prefill pass's share of the next groups, vnni_next_share's scheme line by line).
    template <int G, int T>
    static void tile(const uint8_t* groups, int64_t gb, const uint8_t* act, size_t arb, int64_t k, float* y,
                     int64_t ldy, int valid, const uint8_t* next = nullptr, int64_t next_lines = 0) {
        __m512i acc[G][T];
        for (int t = 0; t < T; ++t) {
            ActI8Row h;
            std::memcpy(&h, act + t * int64_t(arb), sizeof(h));
            for (int g = 0; g < G; ++g) acc[g][t] = _mm512_set1_epi32(-128 * h.sum);
        }
        const uint8_t* q = act + sizeof(ActI8Row);
        const int64_t chunks = (k + 3) / 4;
        int64_t due = 0;  // next_lines / chunks lines a column chunk, carried (Bresenham)
        for (int64_t c = 0; c < chunks; ++c) {
            for (due += next_lines; due >= chunks; due -= chunks, next += 64)
                _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T1);
            __m512i wv[G];
            for (int g = 0; g < G; ++g) wv[g] = _mm512_loadu_si512(groups + g * gb + 64 * c);
            for (int t = 0; t < T; ++t) {
                int32_t x4;  // q is padded with zeros to a multiple of 32: 4 c + 3 is in bounds
                std::memcpy(&x4, q + t * int64_t(arb) + 4 * c, 4);
                const __m512i xb = _mm512_set1_epi32(x4);
                for (int g = 0; g < G; ++g) acc[g][t] = dpbusd512(acc[g][t], wv[g], xb);
            }
        }
        for (int t = 0; t < T; ++t) {
            float d;
            std::memcpy(&d, act + t * int64_t(arb), 4);
            const __m512 dv = _mm512_set1_ps(d);
            for (int g = 0; g < G; ++g) {
                const __m512 v = _mm512_mul_ps(dv, _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), acc[g][t]));
                store_rows16(y + t * ldy + kRows * g, v, g + 1 == G ? valid : kRows);
            }
        }
    }

    // tile<G, num_t> for 1 <= num_t <= T.
    template <int G, int T = kMaxTokens>
    static void tile_n(int num_t, const uint8_t* groups, int64_t gb, const uint8_t* act, size_t arb, int64_t k,
                       float* y, int64_t ldy, int valid, const uint8_t* next, int64_t next_lines) {
        if constexpr (T > 1) {
            if (num_t < T) return tile_n<G, T - 1>(num_t, groups, gb, act, arb, k, y, ldy, valid, next, next_lines);
        }
        tile<G, T>(groups, gb, act, arb, k, y, ldy, valid, next, next_lines);
    }

    // PackedMatmulKernel::gemm (r0 a multiple of 16). Decode: kDecodeGroups groups per tile. Prefill:
    // tokens in chunks whose activations (~256 KiB) stay in L2 while the row groups stream past,
    // kPrefillGroups x up to kMaxTokens accumulators per tile.
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        const uint8_t* base = static_cast<const uint8_t*>(packed);
        const uint8_t* ab = static_cast<const uint8_t*>(act);
        const int64_t gb = group_bytes(k);
        auto group_at = [&](int64_t r) { return base + (r / kRows) * gb; };
        auto valid_at = [&](int64_t r, int groups) {
            const int64_t left = r1 - r - int64_t(kRows) * (groups - 1);
            return int(left < kRows ? left : kRows);
        };
        if (n == 1) {
            int64_t r = r0;
            for (; r + kDecodeGroups * kRows <= r1; r += kDecodeGroups * kRows)
                tile<kDecodeGroups, 1>(group_at(r), gb, ab, arb, k, y + r, ldy, kRows);
            for (; r < r1; r += kRows) tile<1, 1>(group_at(r), gb, ab, arb, k, y + r, ldy, valid_at(r, 1));
            return;
        }
        int64_t chunk = int64_t((256 << 10) / (arb > 0 ? arb : 1)) & ~int64_t(kMaxTokens - 1);
        if (chunk < kMaxTokens) chunk = kMaxTokens;
        for (int64_t t0 = 0; t0 < n; t0 += chunk) {
            const int64_t t1 = t0 + chunk < n ? t0 + chunk : n;
            // The passes over a tile's groups share out the next groups' prefetch (contiguous lines).
            const int64_t passes = (t1 - t0 + kMaxTokens - 1) / kMaxTokens;
            const int64_t lines = kPrefillGroups * gb / 64, share = (lines + passes - 1) / passes;
            for (int64_t r = r0; r < r1; r += kPrefillGroups * kRows) {
                const bool full = r + kPrefillGroups * kRows <= r1;
                for (int64_t t = t0; t < t1; t += kMaxTokens) {
                    const int num_t = int(t1 - t < kMaxTokens ? t1 - t : kMaxTokens);
                    const uint8_t* a = ab + t * int64_t(arb);
                    float* yt = y + t * ldy;
                    if (full) {
                        const uint8_t* next = group_at(r + kPrefillGroups * kRows) + (t - t0) / kMaxTokens * share * 64;
                        tile_n<kPrefillGroups>(num_t, group_at(r), gb, a, arb, k, yt + r, ldy, kRows, next, share);
                    } else {
                        for (int64_t rr = r; rr < r1; rr += kRows)
                            tile_n<1>(num_t, group_at(rr), gb, a, arb, k, yt + rr, ldy, valid_at(rr, 1), nullptr, 0);
                    }
                }
            }
        }
    }
};

constexpr PackedMatmulKernel kVnniI8Packed{VnniI8::packed_bytes, VnniI8::pack, VnniI8::gemm, "16-row VNNI groups"};

#endif  // AVX-512 VNNI

}  // namespace
}  // namespace kiln::kernels::cpu
