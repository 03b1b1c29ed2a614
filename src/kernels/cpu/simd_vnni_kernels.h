// Kernels of the AVX-512 VNNI (+ BF16) build only (matmul_avx512vnni.cc): BF16 weights by vdpbf16ps
// (Bf16Dot, at the end), and packed Q4_0 / Q4_1 / Q8_0 kernels: weights
// repacked at load so that one vpdpbusd computes 4 elements of 8 rows at once (lane i = row i) and
// no horizontal reduction is needed (llama.cpp's q4_0_8x8 repacking idea, kiln's own layout).
//
// Layout (PackedMatmulKernel, matmul.h): rows in groups of 8 (the last group's missing rows repeat
// its last row), per group and 32-element block {fp16 d[8]; fp16 m[8] (Q4_1 only); payload}:
//  - Q4_0 / Q4_1: four 32-byte vectors P_j (j = 0..3), byte 4 i + p of P_j = byte 4 j + p of row i's
//    ggml qs, i.e. low nibble = element 4 j + p, high nibble = element 16 + 4 j + p. P_j & 0xf is
//    chunk j (elements 4 j .. 4 j + 3 of the 8 rows), (P_j >> 4) & 0xf chunk j + 4.
//  - Q8_0: eight 32-byte vectors, byte 4 i + p of vector j = q[4 j + p] of row i XOR 0x80 (q + 128 as
//    an unsigned byte).
// The same bytes per block as the ggml layout (8 blocks per group-block).
//
// Arithmetic: per block and token, acc = -offset * sum(x_q) (offset 8 for Q4_0, 128 for Q8_0, 0 for
// Q4_1; the sums are computed once per call for every token and block), then for chunk j
// acc = vpdpbusd(acc, W_j, broadcast(x_q[4 j .. 4 j + 3])): lane i ends as the exact int32 dot of row
// i's block with the activation block, the same integer block_dots8 gives; scaling and accumulation
// are Legacy::tile8's (acc += (d_w * d_x) * idot by fma, + m_w * s_x for Q4_1), so the results are
// bit-identical to the unpacked kernel and to the other packed layouts of this ISA, and batch
// invariant (decode, prefill and remainder rows run the same lane operations).
#pragma once

#include <immintrin.h>

#include <new>

#include "kernels/cpu/simd_legacy_kernels.h"

#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__) || !defined(__AVX512BF16__)
#error "simd_vnni_kernels.h needs -mavx512vnni -mavx512vl -mavx512bf16"
#endif

namespace kiln::kernels::cpu {
namespace {

template <class Fmt>
struct Vnni {
    static_assert(Fmt::kPayload == 16 || Fmt::kPayload == 32, "Q4_0, Q4_1 or Q8_0");
    static constexpr int kRows = 8;
    static constexpr int kMaxTokens = 8;
    static constexpr bool kNibbles = Fmt::kPayload == 16;
    static constexpr int kOffset = kNibbles ? Fmt::kOffset : 128;
    static constexpr int64_t kHeader = Fmt::kMin ? 32 : 16;
    static constexpr int64_t kGroupBytes = 8 * int64_t(Fmt::kBytes);
    static_assert(kHeader + 8 * int64_t(Fmt::kPayload) == kGroupBytes);
    // Offsets of (token, block) pairs computed per call on the stack; more goes to the heap.
    static constexpr int64_t kStackOffsets = 8192;

    static size_t packed_bytes(int64_t rows, int64_t k) {
        return size_t((rows + kRows - 1) / kRows) * size_t(k / blk::kQK) * size_t(kGroupBytes);
    }

    static void pack(const void* w, size_t wrb, int64_t rows, int64_t k, void* dst) {
        const uint8_t* wb = static_cast<const uint8_t*>(w);
        uint8_t* out = static_cast<uint8_t*>(dst);
        const int64_t nb = k / blk::kQK;
        for (int64_t g = 0; g < (rows + kRows - 1) / kRows; ++g) {
            for (int64_t b = 0; b < nb; ++b, out += kGroupBytes) {
                for (int i = 0; i < kRows; ++i) {
                    const int64_t r = g * kRows + i < rows ? g * kRows + i : rows - 1;  // pad: repeat the last row
                    const uint8_t* src = wb + r * int64_t(wrb) + b * int64_t(Fmt::kBytes);
                    std::memcpy(out + 2 * i, src + Fmt::kD, 2);
                    if constexpr (Fmt::kMin) std::memcpy(out + 16 + 2 * i, src + Fmt::kM, 2);
                    const uint8_t* q = src + Fmt::kPayloadOff;
                    for (int j = 0; j < int(Fmt::kPayload) / 4; ++j) {
                        uint8_t* o = out + kHeader + 32 * j + 4 * i;
                        for (int p = 0; p < 4; ++p) o[p] = kNibbles ? q[4 * j + p] : uint8_t(q[4 * j + p] ^ 0x80);
                    }
                }
            }
        }
    }

    // off[b] = -kOffset * sum of the activation row's 32 int8 values of block b.
    static void offsets(const uint8_t* act, int64_t nb, int32_t* off) {
        const __m256i ones = _mm256_set1_epi8(1);
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i xq =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + b * int64_t(blk::kActQ8Bytes) + blk::kActQ8Q));
            off[b] = -kOffset * avx2_hsum_i32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xq));
        }
    }

    // y[t * ldy + i] for the group's rows i < valid and T tokens at act (row stride arb); off: the T
    // tokens' offsets, token t at off + t * nb. next_group: prefetched block by block (decode).
    template <int T>
    static void tile(const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, const int32_t* off, float* y,
                     int64_t ldy, int valid, const uint8_t* next_group) {
        const int64_t nb = k / blk::kQK;
        __m256 acc[T], macc[T];
        for (int t = 0; t < T; ++t) {
            acc[t] = _mm256_setzero_ps();
            macc[t] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* gb = group + b * kGroupBytes;
            if (next_group) avx2_prefetch_next_group(next_group, kGroupBytes, b);
            __m256i wq[8];
            if constexpr (kNibbles) {
                const __m256i mask = _mm256_set1_epi8(0x0f);
                for (int j = 0; j < 4; ++j) {
                    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kHeader + 32 * j));
                    wq[j] = _mm256_and_si256(v, mask);
                    wq[j + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
                }
            } else {
                for (int j = 0; j < 8; ++j)
                    wq[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kHeader + 32 * j));
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
            __m256 mw = _mm256_setzero_ps();
            if constexpr (Fmt::kMin) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 16)));
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes);
                const uint8_t* xq = xb + blk::kActQ8Q;
                // independent vpdpbusd chains (exact integers: the split changes nothing): 4 chains
                // of 2 for a lone token (decode), 2 of 4 when other tokens' chains interleave
                constexpr int kChains = T == 1 ? 4 : 2;
                __m256i part[kChains];
                part[0] = _mm256_set1_epi32(off[t * nb + b]);
                for (int c = 1; c < kChains; ++c) part[c] = _mm256_setzero_si256();
                for (int j = 0; j < 8; ++j) {
                    int32_t x4;
                    std::memcpy(&x4, xq + 4 * j, 4);
                    part[j % kChains] = _mm256_dpbusd_epi32(part[j % kChains], wq[j], _mm256_set1_epi32(x4));
                }
                __m256i idot = part[0];
                for (int c = 1; c < kChains; ++c) idot = _mm256_add_epi32(idot, part[c]);
                float dx;
                std::memcpy(&dx, xb + blk::kActQ8D, 4);
                const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(dx));
                acc[t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(idot), acc[t]);
                if constexpr (Fmt::kMin) {
                    float sx;
                    std::memcpy(&sx, xb + blk::kActQ8S, 4);
                    macc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(sx), macc[t]);
                }
            }
        }
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int t = 0; t < T; ++t) {
            __m256 sum = acc[t];
            if constexpr (Fmt::kMin) sum = _mm256_add_ps(sum, macc[t]);
            if (valid == kRows) {
                _mm256_storeu_ps(y + t * ldy, sum);
            } else {
                _mm256_maskstore_ps(y + t * ldy, mask, sum);
            }
        }
    }

    static void tile_t(int num_t, const uint8_t* group, const uint8_t* act, size_t arb, int64_t k, const int32_t* off,
                       float* y, int64_t ldy, int valid) {
        switch (num_t) {
            case 8:
                tile<8>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
            case 7:
                tile<7>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
            case 6:
                tile<6>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
            case 5:
                tile<5>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
            case 4:
                tile<4>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
            case 3:
                tile<3>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
            case 2:
                tile<2>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
            default:
                tile<1>(group, act, arb, k, off, y, ldy, valid, nullptr);
                break;
        }
    }

    // PackedMatmulKernel::gemm. Decode: group after group, prefetching the next. Prefill: tokens in
    // chunks whose activations (~256 KiB) stay in L2 while the row groups stream past, up to 4 tokens
    // per weight-block decode.
    static void gemm(const void* packed, const void* act, size_t arb, int64_t n, int64_t k, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
        const uint8_t* base = static_cast<const uint8_t*>(packed);
        const uint8_t* ab = static_cast<const uint8_t*>(act);
        const int64_t nb = k / blk::kQK;
        int64_t chunk = int64_t((256 << 10) / (arb > 0 ? arb : 1)) & ~int64_t(kMaxTokens - 1);
        if (chunk < kMaxTokens) chunk = kMaxTokens;
        if (chunk > n) chunk = n;
        int32_t stack_off[kStackOffsets];
        int32_t* off = stack_off;
        int32_t* heap_off = nullptr;
        if (chunk * nb > kStackOffsets) {
            if (nb <= kStackOffsets) {
                chunk = kStackOffsets / nb;
            } else {  // k > 262144: one token's offsets do not fit the stack buffer
                heap_off = new int32_t[size_t(chunk * nb)];
                off = heap_off;
            }
        }
        auto group_at = [&](int64_t r) { return base + (r / kRows) * nb * kGroupBytes; };
        auto valid_at = [&](int64_t r) { return int(r1 - r < kRows ? r1 - r : kRows); };
        for (int64_t t0 = 0; t0 < n; t0 += chunk) {
            const int64_t t1 = t0 + chunk < n ? t0 + chunk : n;
            for (int64_t t = t0; t < t1; ++t) offsets(ab + t * int64_t(arb), nb, off + (t - t0) * nb);
            if (t1 - t0 == 1) {
                for (int64_t r = r0; r < r1; r += kRows) {
                    tile<1>(group_at(r), ab + t0 * int64_t(arb), arb, k, off, y + t0 * ldy + r, ldy, valid_at(r),
                            group_at(r + kRows));
                }
                continue;
            }
            for (int64_t r = r0; r < r1; r += kRows) {
                for (int64_t t = t0; t < t1; t += kMaxTokens) {
                    const int num_t = int(t1 - t < kMaxTokens ? t1 - t : kMaxTokens);
                    tile_t(num_t, group_at(r), ab + t * int64_t(arb), arb, k, off + (t - t0) * nb, y + t * ldy + r,
                           ldy, valid_at(r));
                }
            }
        }
        delete[] heap_off;
    }
};

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
constexpr PackedMatmulKernel kVnniPacked{Vnni<Fmt>::packed_bytes, Vnni<Fmt>::pack, Vnni<Fmt>::gemm};

// The VNNI layout for Q4_0, Q4_1 and Q8_0; the 5-bit formats keep simd_packed_kernel's.
inline const PackedMatmulKernel* vnni_packed_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kQ8_0:
            return &kVnniPacked<FmtQ8_0>;
        case core::DType::kQ4_0:
            return &kVnniPacked<FmtQ4_0>;
        case core::DType::kQ4_1:
            return &kVnniPacked<FmtQ4_1>;
        default:
            return simd_packed_kernel(weight_type);
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
