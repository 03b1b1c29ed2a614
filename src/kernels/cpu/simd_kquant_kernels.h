// Kernel bodies (AVX2 + FMA + F16C and up) for the GGML K-quants Q2_K ... Q6_K with ActQ8K activations
// (see matmul.h; scalar oracle with the same integer arithmetic: kernels/ref/quant_matmul.cc).
// Per 256-element super-block: unpack 32 weights per vector, maddubs with the int8 activations,
// madd with the sub-block scale broadcast as int16 (exact in int32), sum the super-block in int32,
// then fp32: (d d_x) * isum - (dmin d_x) * sum_j m_j bsum_j for Q4_K/Q5_K, and for Q6_K the -32
// offset (Q3_K: 4) is taken out in integers via the activation bsums:
// sum sc_i (q - 32) x = isum - 32 sum sc_i bsum_i; Q2_K's mins go like Q4_K's.
// Include ONLY from ISA TUs (matmul_avx2.cc, matmul_avx512.cc, matmul_avx512vnni.cc): everything
// here has internal linkage, so each TU gets its own copy compiled with its own instruction set.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/matmul.h"
#include "kernels/block_layouts.h"
#include "kernels/cpu/simd_avx2.h"

namespace kiln::kernels::cpu {
namespace {

namespace blk = blocks;

size_t q8k_row_bytes(int64_t k) {
    return size_t(k / blk::kQK_K) * blk::kActQ8KBytes;
}

void quantize_q8k(const float* x, void* dst, int64_t k) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < k / blk::kQK_K; ++i, x += blk::kQK_K, out += blk::kActQ8KBytes) {
        const float d = avx2_amax(x, blk::kQK_K) / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        int16_t bsums[16];
        for (int g = 0; g < 8; ++g) {  // 32 elements = bsums 2g, 2g+1
            const float* xg = x + 32 * g;
            const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg), id));
            const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 8), id));
            const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 16), id));
            const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 24), id));
            bsums[2 * g] = int16_t(avx2_hsum_i32(_mm256_add_epi32(i0, i1)));
            bsums[2 * g + 1] = int16_t(avx2_hsum_i32(_mm256_add_epi32(i2, i3)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + blk::kActQ8KQ + 32 * g),
                                avx2_pack_i32_to_i8(i0, i1, i2, i3));
        }
        std::memcpy(out + blk::kActQ8KD, &d, 4);
        std::memcpy(out + blk::kActQ8KBsums, bsums, sizeof(bsums));
    }
}

// Q4_K/Q5_K 6-bit scales and mins of the 8 sub-blocks, unpacked 4 bytes at a time:
// sc[0..3] = q[0..3] & 63, m[0..3] = q[4..7] & 63,
// sc[4..7] = (q[8..11] & 15) | (q[0..3] >> 6) << 4, m[4..7] = (q[8..11] >> 4) | (q[4..7] >> 6) << 4.
// Returned as bytes 0..7 = sc[0..7], bytes 8..15 = m[0..7], built in registers (assembling them
// through memory in 4-byte pieces and reloading 8 bytes would stall on store forwarding).
inline __m128i k4_scales(const uint8_t* p) {
    uint32_t u[3];
    std::memcpy(u, p, 12);
    const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    const uint32_t sc_lo = u[0] & k6, m_lo = u[1] & k6;
    const uint32_t sc_hi = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
    return _mm_setr_epi32(int32_t(sc_lo), int32_t(sc_hi), int32_t(m_lo), int32_t(m_hi));
}

template <bool kFiveBit>
struct K4 {
    static constexpr int kDecodeRows = 2;
    static constexpr int kPrefillRows = 1;
    static constexpr size_t kBytes = kFiveBit ? blk::kQ5_KBytes : blk::kQ4_KBytes;
    static constexpr size_t kScales = kFiveBit ? blk::kQ5_KScales : blk::kQ4_KScales;
    static constexpr size_t kQs = kFiveBit ? blk::kQ5_KQs : blk::kQ4_KQs;

    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        const __m256i m4 = _mm256_set1_epi8(0x0f), one8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        __m256 acc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
        }
        const int64_t nb = k / blk::kQK_K;
        for (int64_t b = 0; b < nb; ++b) {
            if constexpr (T == 1) avx2_prefetch_next_group(w + R * int64_t(wrb), R * int64_t(kBytes), b);
            const uint8_t* wb[R];
            __m256i isum[R][T], sc16[R], mins32[R];
            for (int r = 0; r < R; ++r) {
                wb[r] = w + r * int64_t(wrb) + b * int64_t(kBytes);
                const __m128i sm = k4_scales(wb[r] + kScales);
                sc16[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // 8 int16 scales, both lanes
                mins32[r] = _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8));
                for (int t = 0; t < T; ++t) isum[r][t] = _mm256_setzero_si256();
            }
            const uint8_t* xb[T];
            for (int t = 0; t < T; ++t) xb[t] = act + t * int64_t(arb) + b * int64_t(blk::kActQ8KBytes);
            for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles)
                for (int r = 0; r < R; ++r) {
                    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[r] + kQs + 32 * p));
                    __m256i lo = _mm256_and_si256(q, m4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if constexpr (kFiveBit) {
                        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[r] + blk::kQ5_KQh));
                        const __m256i hb_lo = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), one8);
                        const __m256i hb_hi =
                            _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p + 1)), one8);
                        lo = _mm256_or_si256(lo, _mm256_slli_epi16(hb_lo, 4));
                        hi = _mm256_or_si256(hi, _mm256_slli_epi16(hb_hi, 4));
                    }
                    // broadcast int16 scale 2p (bytes 4p, 4p+1) and 2p + 1 (bytes 4p+2, 4p+3)
                    const __m256i s_lo =
                        _mm256_shuffle_epi8(sc16[r], _mm256_set1_epi16(int16_t(0x0100 * (4 * p + 1) + 4 * p)));
                    const __m256i s_hi =
                        _mm256_shuffle_epi8(sc16[r], _mm256_set1_epi16(int16_t(0x0100 * (4 * p + 3) + 4 * p + 2)));
                    for (int t = 0; t < T; ++t) {
                        const uint8_t* xq = xb[t] + blk::kActQ8KQ + 64 * p;
                        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
                        const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
                        const __m256i d0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s_lo);
                        const __m256i d1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), s_hi);
                        isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(d0, d1));
                    }
                }
            }
            for (int t = 0; t < T; ++t) {
                const float dx = avx2_load_f32(xb[t] + blk::kActQ8KD);
                // bsum pairs: lane j = bsums[2j] + bsums[2j + 1] = sum of sub-block j's activations
                const __m256i bs = _mm256_madd_epi16(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[t] + blk::kActQ8KBsums)), ones16);
                for (int r = 0; r < R; ++r) {
                    const float d = avx2_half(wb[r]), dmin = avx2_half(wb[r] + 2);
                    const __m256i mprod = _mm256_mullo_epi32(mins32[r], bs);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
                    acc[r][t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * dx), _mm256_cvtepi32_ps(mprod), acc[r][t]);
                }
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) y[t * ldy + r] = avx2_hsum(acc[r][t]);
        }
    }
};

// Formats with 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K). Per 128-element half h and step S = 0..3,
// values(S) gives the 32 unsigned values u of elements 128h + 32S .. + 31 (sub-blocks 8h + 2S and
// 8h + 2S + 1); weight = scale_i * (u - kOffset) (Q2_K: - min_i instead of an offset).
// Q6_K: u = 6 bits (low 4 from ql, high 2 from qh), offset 32.
struct Q6Fmt {
    static constexpr size_t kBytes = blk::kQ6_KBytes;
    static constexpr int kOffset = 32;
    static constexpr bool kMin = false;
    struct Half {
        __m256i ql0, ql1, qh;
    };
    static Half load_half(const uint8_t* b, int half) {
        const uint8_t* ql = b + blk::kQ6_KQl + 64 * half;
        return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql)),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32)),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + blk::kQ6_KQh + 32 * half))};
    }
    template <int S>
    static __m256i values(const Half& h, int) {
        const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
        const __m256i src = (S & 1) ? h.ql1 : h.ql0;
        const __m256i low = (S >> 1) ? _mm256_and_si256(_mm256_srli_epi16(src, 4), m4) : _mm256_and_si256(src, m4);
        __m256i high;  // bits 2S, 2S+1 of qh moved to bits 4, 5
        if constexpr (S == 0) high = _mm256_slli_epi16(h.qh, 4);
        if constexpr (S == 1) high = _mm256_slli_epi16(h.qh, 2);
        if constexpr (S == 2) high = h.qh;
        if constexpr (S == 3) high = _mm256_srli_epi16(h.qh, 2);
        return _mm256_or_si256(low, _mm256_and_si256(high, m30));
    }
    static __m256i scales16(const uint8_t* b) {
        return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + blk::kQ6_KScales)));
    }
    static __m256i mins16(const uint8_t*) { return _mm256_setzero_si256(); }
    static float d(const uint8_t* b) { return avx2_half(b + blk::kQ6_KD); }
    static float dmin(const uint8_t*) { return 0.0f; }
};

// Q3_K: u = 2 low bits | hbit << 2 (0..7), weight = (sc - 32) (u - 4).
struct Q3Fmt {
    static constexpr size_t kBytes = blk::kQ3_KBytes;
    static constexpr int kOffset = 4;
    static constexpr bool kMin = false;
    struct Half {
        __m256i q, hmask;
    };
    static Half load_half(const uint8_t* b, int half) {
        return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + blk::kQ3_KQs + 32 * half)),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + blk::kQ3_KHmask))};
    }
    template <int S>
    static __m256i values(const Half& h, int half) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(h.q, 2 * S), _mm256_set1_epi8(3));
        const __m256i hb =
            _mm256_and_si256(_mm256_srl_epi16(h.hmask, _mm_cvtsi32_si128(4 * half + S)), _mm256_set1_epi8(1));
        return _mm256_or_si256(low, _mm256_slli_epi16(hb, 2));
    }
    // 16 6-bit scales (see quant_blocks.h / dequant.cc), assembled in registers, minus 32.
    static __m256i scales16(const uint8_t* b) {
        uint32_t a[3];
        std::memcpy(a, b + blk::kQ3_KScales, 12);
        const uint32_t k4 = 0x0f0f0f0f, k2 = 0x03030303;
        const __m128i v =
            _mm_setr_epi32(int32_t((a[0] & k4) | ((a[2] & k2) << 4)), int32_t((a[1] & k4) | (((a[2] >> 2) & k2) << 4)),
                           int32_t(((a[0] >> 4) & k4) | (((a[2] >> 4) & k2) << 4)),
                           int32_t(((a[1] >> 4) & k4) | (((a[2] >> 6) & k2) << 4)));
        return _mm256_cvtepi8_epi16(_mm_sub_epi8(v, _mm_set1_epi8(32)));
    }
    static __m256i mins16(const uint8_t*) { return _mm256_setzero_si256(); }
    static float d(const uint8_t* b) { return avx2_half(b + blk::kQ3_KD); }
    static float dmin(const uint8_t*) { return 0.0f; }
};

// Q2_K: u = 2 bits, weight = sc u - m (4-bit scale and min per sub-block).
struct Q2Fmt {
    static constexpr size_t kBytes = blk::kQ2_KBytes;
    static constexpr int kOffset = 0;
    static constexpr bool kMin = true;
    struct Half {
        __m256i q;
    };
    static Half load_half(const uint8_t* b, int half) {
        return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + blk::kQ2_KQs + 32 * half))};
    }
    template <int S>
    static __m256i values(const Half& h, int) {
        return _mm256_and_si256(_mm256_srli_epi16(h.q, 2 * S), _mm256_set1_epi8(3));
    }
    static __m128i packed(const uint8_t* b) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + blk::kQ2_KScales));
    }
    static __m256i scales16(const uint8_t* b) {
        return _mm256_cvtepu8_epi16(_mm_and_si128(packed(b), _mm_set1_epi8(0x0f)));
    }
    static __m256i mins16(const uint8_t* b) {
        return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed(b), 4), _mm_set1_epi8(0x0f)));
    }
    static float d(const uint8_t* b) { return avx2_half(b + blk::kQ2_KD); }
    static float dmin(const uint8_t* b) { return avx2_half(b + blk::kQ2_KDmin); }
};

template <class F>
struct Sub16 {
    static constexpr int kDecodeRows = 2;
    static constexpr int kPrefillRows = 1;

    template <int S, int R, int T>
    static void step(const typename F::Half (&hv)[R], const __m256i (&sc_half)[R], int half,
                     const uint8_t* const (&xb)[T], __m256i (&isum)[R][T]) {
        // [scale 8 half + 2S as int16 x8 | scale 8 half + 2S + 1 x8]: sub-blocks of elements 0..15, 16..31
        const __m256i idx =
            _mm256_setr_epi8(4 * S, 4 * S + 1, 4 * S, 4 * S + 1, 4 * S, 4 * S + 1, 4 * S, 4 * S + 1, 4 * S, 4 * S + 1,
                             4 * S, 4 * S + 1, 4 * S, 4 * S + 1, 4 * S, 4 * S + 1, 4 * S + 2, 4 * S + 3, 4 * S + 2,
                             4 * S + 3, 4 * S + 2, 4 * S + 3, 4 * S + 2, 4 * S + 3, 4 * S + 2, 4 * S + 3, 4 * S + 2,
                             4 * S + 3, 4 * S + 2, 4 * S + 3, 4 * S + 2, 4 * S + 3);
        for (int r = 0; r < R; ++r) {
            const __m256i q = F::template values<S>(hv[r], half);
            const __m256i scv = _mm256_shuffle_epi8(sc_half[r], idx);
            for (int t = 0; t < T; ++t) {
                const __m256i x =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[t] + blk::kActQ8KQ + 128 * half + 32 * S));
                isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scv));
            }
        }
    }

    // Per super-block, in int32: sum_i sc_i sum (u - off) x = isum - off sum_i sc_i bsum_i; the Q2_K min
    // term sum_i m_i bsum_i is scaled by dmin d_x separately.
    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        __m256 acc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
        }
        const int64_t nb = k / blk::kQK_K;
        for (int64_t b = 0; b < nb; ++b) {
            if constexpr (T == 1) avx2_prefetch_next_group(w + R * int64_t(wrb), R * int64_t(F::kBytes), b);
            const uint8_t* wb[R];
            __m256i isum[R][T], sc16[R];
            for (int r = 0; r < R; ++r) {
                wb[r] = w + r * int64_t(wrb) + b * int64_t(F::kBytes);
                sc16[r] = F::scales16(wb[r]);
                for (int t = 0; t < T; ++t) isum[r][t] = _mm256_setzero_si256();
            }
            const uint8_t* xb[T];
            for (int t = 0; t < T; ++t) xb[t] = act + t * int64_t(arb) + b * int64_t(blk::kActQ8KBytes);
            for (int half = 0; half < 2; ++half) {
                typename F::Half hv[R];
                __m256i sc_half[R];
                for (int r = 0; r < R; ++r) {
                    hv[r] = F::load_half(wb[r], half);
                    // both 128-bit lanes = the 8 int16 scales of this half
                    sc_half[r] = half ? _mm256_permute2x128_si256(sc16[r], sc16[r], 0x11)
                                      : _mm256_permute2x128_si256(sc16[r], sc16[r], 0x00);
                }
                step<0, R, T>(hv, sc_half, half, xb, isum);
                step<1, R, T>(hv, sc_half, half, xb, isum);
                step<2, R, T>(hv, sc_half, half, xb, isum);
                step<3, R, T>(hv, sc_half, half, xb, isum);
            }
            for (int r = 0; r < R; ++r) {
                const float d = F::d(wb[r]);
                for (int t = 0; t < T; ++t) {
                    const float dx = avx2_load_f32(xb[t] + blk::kActQ8KD);
                    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[t] + blk::kActQ8KBsums));
                    __m256i tot = isum[r][t];
                    if constexpr (F::kOffset != 0) {
                        tot = _mm256_sub_epi32(
                            tot, _mm256_mullo_epi32(_mm256_madd_epi16(bs, sc16[r]), _mm256_set1_epi32(F::kOffset)));
                    }
                    acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(tot), acc[r][t]);
                    if constexpr (F::kMin) {
                        const __m256i mprod = _mm256_madd_epi16(bs, F::mins16(wb[r]));
                        acc[r][t] =
                            _mm256_fnmadd_ps(_mm256_set1_ps(F::dmin(wb[r]) * dx), _mm256_cvtepi32_ps(mprod), acc[r][t]);
                    }
                }
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) y[t * ldy + r] = avx2_hsum(acc[r][t]);
        }
    }
};

constexpr MatmulKernel kQ4_K{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k, avx2_gemm<K4<false>>};
constexpr MatmulKernel kQ5_K{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k, avx2_gemm<K4<true>>};
constexpr MatmulKernel kQ6_K{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k, avx2_gemm<Sub16<Q6Fmt>>};
constexpr MatmulKernel kQ3_K{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k, avx2_gemm<Sub16<Q3Fmt>>};
constexpr MatmulKernel kQ2_K{ActFormat::kQ8K, q8k_row_bytes, quantize_q8k, avx2_gemm<Sub16<Q2Fmt>>};

inline const MatmulKernel* simd_kquant_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kQ2_K:
            return &kQ2_K;
        case core::DType::kQ3_K:
            return &kQ3_K;
        case core::DType::kQ4_K:
            return &kQ4_K;
        case core::DType::kQ5_K:
            return &kQ5_K;
        case core::DType::kQ6_K:
            return &kQ6_K;
        default:
            return nullptr;
    }
}

}  // namespace

}  // namespace kiln::kernels::cpu
