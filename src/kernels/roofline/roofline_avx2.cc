// AVX2 + FMA inner loops of the roofline probes (see roofline_kernels.h). This file alone is built
// with -mavx2 -mfma (src/kernels/CMakeLists.txt gives them to every *_avx2.cc); roofline.cc calls
// it only when the CPU reports AVX2 and FMA. KILN_ROOFLINE_OPAQUE emits no instruction; it keeps
// the compiler from hoisting the int8 loop's loads and products (roofline_kernels.h).
#include "kernels/roofline/roofline_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace kiln::kernels::roofline::detail {

uint64_t read_avx2(const uint8_t* p, size_t bytes, int streams) {
    // Two streams' worth of accumulators each for 2 loads per 64-byte line; vpaddq retires far
    // faster than memory delivers, so the loads are the only limit.
    __m256i acc[8];
    for (__m256i& a : acc) a = _mm256_setzero_si256();
    const size_t per_stream = bytes / size_t(streams);
    const uint8_t* s[16];
    for (int k = 0; k < streams; ++k) s[k] = p + size_t(k) * per_stream;
    if (streams == 4) {  // the default, unrolled so that all pointers live in registers
        const uint8_t *s0 = s[0], *s1 = s[1], *s2 = s[2], *s3 = s[3];
        for (size_t off = 0; off < per_stream; off += 64) {
            acc[0] = _mm256_add_epi64(acc[0], _mm256_load_si256(reinterpret_cast<const __m256i*>(s0 + off)));
            acc[1] = _mm256_add_epi64(acc[1], _mm256_load_si256(reinterpret_cast<const __m256i*>(s0 + off + 32)));
            acc[2] = _mm256_add_epi64(acc[2], _mm256_load_si256(reinterpret_cast<const __m256i*>(s1 + off)));
            acc[3] = _mm256_add_epi64(acc[3], _mm256_load_si256(reinterpret_cast<const __m256i*>(s1 + off + 32)));
            acc[4] = _mm256_add_epi64(acc[4], _mm256_load_si256(reinterpret_cast<const __m256i*>(s2 + off)));
            acc[5] = _mm256_add_epi64(acc[5], _mm256_load_si256(reinterpret_cast<const __m256i*>(s2 + off + 32)));
            acc[6] = _mm256_add_epi64(acc[6], _mm256_load_si256(reinterpret_cast<const __m256i*>(s3 + off)));
            acc[7] = _mm256_add_epi64(acc[7], _mm256_load_si256(reinterpret_cast<const __m256i*>(s3 + off + 32)));
        }
    } else {
        for (size_t off = 0; off < per_stream; off += 64) {
            for (int k = 0; k < streams; ++k) {
                const __m256i* q = reinterpret_cast<const __m256i*>(s[k] + off);
                acc[(2 * k) & 7] = _mm256_add_epi64(acc[(2 * k) & 7], _mm256_load_si256(q));
                acc[(2 * k + 1) & 7] = _mm256_add_epi64(acc[(2 * k + 1) & 7], _mm256_load_si256(q + 1));
            }
        }
    }
    __m256i sum = acc[0];
    for (int k = 1; k < 8; ++k) sum = _mm256_add_epi64(sum, acc[k]);
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

float fma_avx2(int64_t iters) {
    static_assert(kFmaChains == 12);
    // acc = acc * a + b stays bounded (a < 1) and never goes subnormal, so no slow paths.
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-3f);
    __m256 c0 = _mm256_set1_ps(0.1f), c1 = _mm256_set1_ps(0.2f), c2 = _mm256_set1_ps(0.3f), c3 = _mm256_set1_ps(0.4f),
           c4 = _mm256_set1_ps(0.5f), c5 = _mm256_set1_ps(0.6f), c6 = _mm256_set1_ps(0.7f), c7 = _mm256_set1_ps(0.8f),
           c8 = _mm256_set1_ps(0.9f), c9 = _mm256_set1_ps(1.0f), c10 = _mm256_set1_ps(1.1f), c11 = _mm256_set1_ps(1.2f);
    for (int64_t i = 0; i < iters; ++i) {
        c0 = _mm256_fmadd_ps(c0, a, b);
        c1 = _mm256_fmadd_ps(c1, a, b);
        c2 = _mm256_fmadd_ps(c2, a, b);
        c3 = _mm256_fmadd_ps(c3, a, b);
        c4 = _mm256_fmadd_ps(c4, a, b);
        c5 = _mm256_fmadd_ps(c5, a, b);
        c6 = _mm256_fmadd_ps(c6, a, b);
        c7 = _mm256_fmadd_ps(c7, a, b);
        c8 = _mm256_fmadd_ps(c8, a, b);
        c9 = _mm256_fmadd_ps(c9, a, b);
        c10 = _mm256_fmadd_ps(c10, a, b);
        c11 = _mm256_fmadd_ps(c11, a, b);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    return lanes[0] + lanes[7];
}

int32_t int8_avx2(int64_t iters) {
    static_assert(kInt8Chains == 8);
    const __m256i u = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    alignas(64) int8_t block[kOperandBytes];
    for (int j = 0; j < kOperandBytes; ++j) block[j] = int8_t(j % 7 - 3);
    const __m256i* w = reinterpret_cast<const __m256i*>(block);
    // Named accumulators, not an array: with an array GCC keeps them in memory across the asm.
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    // One u8 x s8 dot step: [32] u8 x [32] s8 -> [16] i16 pair sums -> [8] i32 quad sums, accumulated.
#define KILN_DOT(acc, k) \
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_load_si256(w + k)), ones))
    for (int64_t i = 0; i < iters; ++i) {
        KILN_ROOFLINE_OPAQUE(block);
        KILN_DOT(a0, 0);
        KILN_DOT(a1, 1);
        KILN_DOT(a2, 2);
        KILN_DOT(a3, 3);
        KILN_DOT(a4, 4);
        KILN_DOT(a5, 5);
        KILN_DOT(a6, 6);
        KILN_DOT(a7, 7);
    }
#undef KILN_DOT
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

}  // namespace kiln::kernels::roofline::detail
#endif  // __x86_64__
