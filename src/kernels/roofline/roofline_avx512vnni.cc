// AVX-512 VNNI and BF16 inner loops of the roofline probes (see roofline_kernels.h). Built with the
// flags src/kernels/CMakeLists.txt gives every *_avx512vnni.cc (AVX-512 F/BW/VL/DQ + VNNI + BF16);
// roofline.cc calls each loop only when __builtin_cpu_supports reports its feature. 12 zmm
// accumulator chains cover the ~5-cycle latency of vpdpbusd / vdpbf16ps at up to 2 per cycle.
// Not exercised on the AVX2-only development machines: it compiles there, it is never run there.
#include "kernels/roofline/roofline_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace kiln::kernels::roofline::detail {

// Twelve named accumulators (an array would be kept in memory across the opaque asm).
#define KILN_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

int32_t vnni_avx512(int64_t iters) {
    static_assert(kAvx512Chains == 12);
    const __m512i u = _mm512_set1_epi8(1);
    alignas(64) int8_t block[kOperandBytes];
    for (int j = 0; j < kOperandBytes; ++j) block[j] = int8_t(j % 7 - 3);
    const __m512i* w = reinterpret_cast<const __m512i*>(block);
#define KILN_DECL(k) __m512i a##k = _mm512_setzero_si512();
#define KILN_STEP(k) a##k = _mm512_dpbusd_epi32(a##k, u, _mm512_load_si512(w + k));
#define KILN_SUM(k) s = _mm512_add_epi32(s, a##k);
    KILN_12(KILN_DECL)
    for (int64_t i = 0; i < iters; ++i) {
        KILN_ROOFLINE_OPAQUE(block);
        KILN_12(KILN_STEP)
    }
    __m512i s = _mm512_setzero_si512();
    KILN_12(KILN_SUM)
#undef KILN_DECL
#undef KILN_STEP
#undef KILN_SUM
    alignas(64) int32_t lanes[16];  // not _mm512_reduce_add_epi32: GCC 12's warns -Wuninitialized
    _mm512_store_si512(lanes, s);
    return lanes[0] + lanes[15];
}

float bf16_avx512(int64_t iters) {
    static_assert(kAvx512Chains == 12);
    // a ~1e-4 times operands ~1: the accumulators grow by ~2e-4 per step, far from overflow.
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x38d1);  // bf16 ~ 9.98e-5
    alignas(64) uint16_t block[kOperandBytes / 2];
    for (int j = 0; j < kOperandBytes / 2; ++j) block[j] = uint16_t(0x3f80 + (j % 7));  // bf16 ~1.0 .. 1.05
    const __m512i* w = reinterpret_cast<const __m512i*>(block);
#define KILN_DECL(k) __m512 a##k = _mm512_setzero_ps();
#define KILN_STEP(k) a##k = _mm512_dpbf16_ps(a##k, a, (__m512bh)_mm512_load_si512(w + k));
#define KILN_SUM(k) s = _mm512_add_ps(s, a##k);
    KILN_12(KILN_DECL)
    for (int64_t i = 0; i < iters; ++i) {
        KILN_ROOFLINE_OPAQUE(block);
        KILN_12(KILN_STEP)
    }
    __m512 s = _mm512_setzero_ps();
    KILN_12(KILN_SUM)
#undef KILN_DECL
#undef KILN_STEP
#undef KILN_SUM
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s);
    return lanes[0] + lanes[15];
}
#undef KILN_12

}  // namespace kiln::kernels::roofline::detail
#endif  // __x86_64__
