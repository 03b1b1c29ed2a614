// AVX-VNNI inner loop of the roofline probes (see roofline_kernels.h): the VEX-encoded 256-bit
// vpdpbusd the avx-vnni matmul kernels use. Built with the flags src/kernels/CMakeLists.txt gives
// every *_avxvnni.cc (AVX2 + FMA + F16C + AVX-VNNI); roofline.cc calls it only when
// __builtin_cpu_supports("avxvnni"). 12 ymm accumulator chains (of the 16 registers) cover the
// ~5-cycle latency at up to 2 per cycle.
#include "kernels/roofline/roofline_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace kiln::kernels::roofline::detail {

#define KILN_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

int32_t vnni_avx256(int64_t iters) {
    static_assert(kVnni256Chains == 12);
    const __m256i u = _mm256_set1_epi8(1);
    alignas(64) int8_t block[kOperandBytes];
    for (int j = 0; j < kOperandBytes; ++j) block[j] = int8_t(j % 7 - 3);
    const __m256i* w = reinterpret_cast<const __m256i*>(block);
#define KILN_DECL(k) __m256i a##k = _mm256_setzero_si256();
#define KILN_STEP(k) a##k = _mm256_dpbusd_avx_epi32(a##k, u, _mm256_load_si256(w + k));
#define KILN_SUM(k) s = _mm256_add_epi32(s, a##k);
    KILN_12(KILN_DECL)
    for (int64_t i = 0; i < iters; ++i) {
        KILN_ROOFLINE_OPAQUE(block);
        KILN_12(KILN_STEP)
    }
    __m256i s = _mm256_setzero_si256();
    KILN_12(KILN_SUM)
#undef KILN_DECL
#undef KILN_STEP
#undef KILN_SUM
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
    return lanes[0] + lanes[7];
}
#undef KILN_12

}  // namespace kiln::kernels::roofline::detail
#endif  // __x86_64__
