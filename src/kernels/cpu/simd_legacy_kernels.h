// Kernel bodies for F32/F16/BF16 weights (f32 activations) and the legacy 32-element GGML formats
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ActQ8 activations); see matmul.h for the contract and
// kernels/ref/quant_matmul.cc for the scalar oracle with the same integer arithmetic.
// Per block: unpack the weight bytes once (nibbles with shift/mask, the 5th bit from qh via a
// byte shuffle + compare), integer dot u8 x s8 (Q8_0 via the sign trick |w| x sign(x, w); Q4_0/Q5_0
// as unsigned q minus offset * sum(x), the sum computed once per activation block for all rows;
// maddubs + madd on AVX2, one vpdpbusd where the TU is built with AVX512-VNNI, see simd_avx2.h),
// then one FMA into an fp32 accumulator per (weight row, activation row).
// Include ONLY from ISA TUs (matmul_avx2.cc, matmul_avx512.cc, matmul_avx512vnni.cc): everything
// here has internal linkage, so each TU gets its own copy compiled with its own instruction set.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/simd_avx2.h"

namespace kiln::kernels::cpu {
namespace {

namespace blk = blocks;

// ---- activations ----

size_t f32_row_bytes(int64_t k) {
    return size_t(k) * 4;
}
size_t q8_row_bytes(int64_t k) {
    return size_t(k / blk::kQK) * blk::kActQ8Bytes;
}

void copy_row(const float* x, void* dst, int64_t k) {
    std::memcpy(dst, x, size_t(k) * 4);
}

void quantize_q8(const float* x, void* dst, int64_t k) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < k / blk::kQK; ++i, x += blk::kQK, out += blk::kActQ8Bytes) {
        const float d = avx2_amax(x, blk::kQK) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        const __m256i q = avx2_quantize32(x, _mm256_set1_ps(id), &sum);
        const float s = d * float(sum);
        std::memcpy(out + blk::kActQ8D, &d, 4);
        std::memcpy(out + blk::kActQ8S, &s, 4);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + blk::kActQ8Q), q);
    }
}

// ---- legacy weight formats: load(block) -> 32 bytes in element order, scale d, min m ----

inline __m256i nibbles32(const uint8_t* qs) {
    // the 16 bytes in both lanes; the high lane shifted right by 4 (64-bit shifts: the mask drops
    // the bits that cross bytes)
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

// Byte j = 0x10 when bit j of the little-endian u32 at p is set, else 0.
inline __m256i bit4_from_qh(const uint8_t* p) {
    uint32_t qh;
    std::memcpy(&qh, p, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bitsel = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)), shuf);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bitsel), bitsel);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// [fp16 at p, 0, 0, 0] and [fp16 at p, fp16 at p + 2, 0, 0] as floats: the block's (d) or (d, m).
inline __m128 half_lane0(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(h));
}
inline __m128 half_pair(const uint8_t* p) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(int32_t(u)));
}

// kSigned: weights are int8 (sign trick); otherwise unsigned with weight = d * (u - kOffset) (+ m).
struct FmtQ8_0 {
    static constexpr size_t kBytes = blk::kQ8_0Bytes;
    static constexpr bool kSigned = true, kMin = false;
    static constexpr int kOffset = 0;
    static __m128 scales(const uint8_t* b) { return half_lane0(b + blk::kQ8_0D); }
    static __m256i load(const uint8_t* b) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + blk::kQ8_0Qs));
    }
};
struct FmtQ4_0 {
    static constexpr size_t kBytes = blk::kQ4_0Bytes;
    static constexpr bool kSigned = false, kMin = false;
    static constexpr int kOffset = 8;
    static __m128 scales(const uint8_t* b) { return half_lane0(b + blk::kQ4_0D); }
    static __m256i load(const uint8_t* b) { return nibbles32(b + blk::kQ4_0Qs); }
};
struct FmtQ4_1 {
    static constexpr size_t kBytes = blk::kQ4_1Bytes;
    static constexpr bool kSigned = false, kMin = true;
    static constexpr int kOffset = 0;
    static_assert(blk::kQ4_1M == blk::kQ4_1D + 2);
    static __m128 scales(const uint8_t* b) { return half_pair(b + blk::kQ4_1D); }
    static __m256i load(const uint8_t* b) { return nibbles32(b + blk::kQ4_1Qs); }
};
struct FmtQ5_0 {
    static constexpr size_t kBytes = blk::kQ5_0Bytes;
    static constexpr bool kSigned = false, kMin = false;
    static constexpr int kOffset = 16;
    static __m128 scales(const uint8_t* b) { return half_lane0(b + blk::kQ5_0D); }
    static __m256i load(const uint8_t* b) {
        return _mm256_or_si256(nibbles32(b + blk::kQ5_0Qs), bit4_from_qh(b + blk::kQ5_0Qh));
    }
};
struct FmtQ5_1 {
    static constexpr size_t kBytes = blk::kQ5_1Bytes;
    static constexpr bool kSigned = false, kMin = true;
    static constexpr int kOffset = 0;
    static_assert(blk::kQ5_1M == blk::kQ5_1D + 2);
    static __m128 scales(const uint8_t* b) { return half_pair(b + blk::kQ5_1D); }
    static __m256i load(const uint8_t* b) {
        return _mm256_or_si256(nibbles32(b + blk::kQ5_1Qs), bit4_from_qh(b + blk::kQ5_1Qh));
    }
};

template <class Fmt>
struct Legacy {
    static constexpr int kDecodeRows = 4;
    static constexpr int kPrefillRows = 2;

    // Scales in the vector domain: [d_w, m_w] * [d_x, s_x] = [d_w d_x, m_w s_x] in one multiply; lane
    // 0 is broadcast for the FMA, lane 1 (the min term, formats with a min) summed in an xmm.
    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        __m256 acc[R][T];
        __m128 macc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) {
                acc[r][t] = _mm256_setzero_ps();
                macc[r][t] = _mm_setzero_ps();
            }
        }
        static_assert(blk::kActQ8S == blk::kActQ8D + 4);
        const int64_t nb = k / blk::kQK;
        for (int64_t b = 0; b < nb; ++b) {
            if constexpr (T == 1) avx2_prefetch_next_group(w + R * int64_t(wrb), R * int64_t(Fmt::kBytes), b);
            __m256i wq[R], wu[R];
            __m128 ws[R];
            for (int r = 0; r < R; ++r) {
                const uint8_t* wb = w + r * int64_t(wrb) + b * int64_t(Fmt::kBytes);
                ws[r] = Fmt::scales(wb);
                wq[r] = Fmt::load(wb);
                wu[r] = Fmt::kSigned ? _mm256_abs_epi8(wq[r]) : wq[r];
            }
            for (int t = 0; t < T; ++t) {
                const uint8_t* xb = act + t * int64_t(arb) + b * int64_t(blk::kActQ8Bytes);
                // [d_x, s_x]: an unaligned 8-byte load (_mm_loadl_epi64 takes any alignment)
                const __m128 xs =
                    _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(xb + blk::kActQ8D)));
                const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + blk::kActQ8Q));
                // offset * (sums of 4 activations), lane-aligned with avx2_dot_u8s8, shared by the R rows:
                // dot(u, x) - off = dot(u - offset, x) exactly
                __m256i off = _mm256_setzero_si256();
                if constexpr (Fmt::kOffset != 0) off = avx2_dot_u8s8(_mm256_set1_epi8(Fmt::kOffset), xq);
                for (int r = 0; r < R; ++r) {
                    const __m256i xsg = Fmt::kSigned ? _mm256_sign_epi8(xq, wq[r]) : xq;
                    __m256i idot = avx2_dot_u8s8(wu[r], xsg);
                    if constexpr (Fmt::kOffset != 0) idot = _mm256_sub_epi32(idot, off);
                    const __m256 p = _mm256_cvtepi32_ps(idot);
                    const __m128 prod = _mm_mul_ps(ws[r], xs);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(prod), p, acc[r][t]);
                    if constexpr (Fmt::kMin) macc[r][t] = _mm_add_ps(macc[r][t], prod);
                }
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) {
                float sum = avx2_hsum(acc[r][t]);
                if constexpr (Fmt::kMin) sum += _mm_cvtss_f32(_mm_movehdup_ps(macc[r][t]));
                y[t * ldy + r] = sum;
            }
        }
    }
};

// ---- float weights: 8 elements per step, scalar tail ----

struct FloatF32 {
    static constexpr size_t kElemBytes = 4;
    static __m256 load8(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
    static float load1(const uint8_t* p) { return avx2_load_f32(p); }
};
struct FloatF16 {
    static constexpr size_t kElemBytes = 2;
    static __m256 load8(const uint8_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static float load1(const uint8_t* p) { return avx2_half(p); }
};
struct FloatBF16 {
    static constexpr size_t kElemBytes = 2;
    static __m256 load8(const uint8_t* p) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static float load1(const uint8_t* p) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const uint32_t u = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

template <class Elem>
struct Float {
    static constexpr int kDecodeRows = 4;
    static constexpr int kPrefillRows = 2;

    template <int R, int T>
    static void tile(const uint8_t* w, size_t wrb, const uint8_t* act, size_t arb, int64_t k, float* y, int64_t ldy) {
        __m256 acc[R][T];
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
        }
        int64_t i = 0;
        for (; i + 8 <= k; i += 8) {
            __m256 wv[R];
            for (int r = 0; r < R; ++r) wv[r] = Elem::load8(w + r * int64_t(wrb) + i * int64_t(Elem::kElemBytes));
            for (int t = 0; t < T; ++t) {
                const __m256 xv = _mm256_loadu_ps(reinterpret_cast<const float*>(act + t * int64_t(arb) + 4 * i));
                for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
            }
        }
        for (int r = 0; r < R; ++r) {
            for (int t = 0; t < T; ++t) {
                float sum = avx2_hsum(acc[r][t]);
                const uint8_t* x = act + t * int64_t(arb);  // rows need not be 4-byte aligned
                for (int64_t j = i; j < k; ++j) {
                    sum += Elem::load1(w + r * int64_t(wrb) + j * int64_t(Elem::kElemBytes)) * avx2_load_f32(x + 4 * j);
                }
                y[t * ldy + r] = sum;
            }
        }
    }
};

constexpr MatmulKernel kF32{ActFormat::kF32, f32_row_bytes, copy_row, avx2_gemm<Float<FloatF32>>};
constexpr MatmulKernel kF16{ActFormat::kF32, f32_row_bytes, copy_row, avx2_gemm<Float<FloatF16>>};
constexpr MatmulKernel kBF16{ActFormat::kF32, f32_row_bytes, copy_row, avx2_gemm<Float<FloatBF16>>};
constexpr MatmulKernel kQ8_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, avx2_gemm<Legacy<FmtQ8_0>>};
constexpr MatmulKernel kQ4_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, avx2_gemm<Legacy<FmtQ4_0>>};
constexpr MatmulKernel kQ4_1{ActFormat::kQ8, q8_row_bytes, quantize_q8, avx2_gemm<Legacy<FmtQ4_1>>};
constexpr MatmulKernel kQ5_0{ActFormat::kQ8, q8_row_bytes, quantize_q8, avx2_gemm<Legacy<FmtQ5_0>>};
constexpr MatmulKernel kQ5_1{ActFormat::kQ8, q8_row_bytes, quantize_q8, avx2_gemm<Legacy<FmtQ5_1>>};

inline const MatmulKernel* simd_legacy_kernel(core::DType weight_type) {
    switch (weight_type) {
        case core::DType::kF32:
            return &kF32;
        case core::DType::kF16:
            return &kF16;
        case core::DType::kBF16:
            return &kBF16;
        case core::DType::kQ8_0:
            return &kQ8_0;
        case core::DType::kQ4_0:
            return &kQ4_0;
        case core::DType::kQ4_1:
            return &kQ4_1;
        case core::DType::kQ5_0:
            return &kQ5_0;
        case core::DType::kQ5_1:
            return &kQ5_1;
        default:
            return nullptr;
    }
}

}  // namespace

}  // namespace kiln::kernels::cpu
