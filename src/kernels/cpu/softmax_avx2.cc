// AVX2 + FMA build of the sampler's softmax (softmax.h). Exports only avx2_softmax_kernels.
#include <immintrin.h>

#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/softmax.h"

namespace kiln::kernels::cpu {
namespace {

// exp(x - m) for 8 lanes; NaN and -inf x give 0 (avx2_exp_nonpos keeps only x - m >= -87).
inline __m256 exp8(__m256 x, __m256 m) { return avx2_exp_nonpos(_mm256_sub_ps(x, m)); }

float scale_max_avx2(float* x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s), ninf = _mm256_set1_ps(-__builtin_huge_valf());
    __m256 mx = ninf;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 y = _mm256_blendv_ps(_mm256_mul_ps(v, sv), ninf, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        _mm256_storeu_ps(x + i, y);
        mx = _mm256_max_ps(mx, y);
    }
    alignas(32) float t[8];
    _mm256_store_ps(t, mx);
    float m = t[0];
    for (int j = 1; j < 8; ++j) m = t[j] > m ? t[j] : m;
    for (; i < n; ++i) {
        x[i] = x[i] != x[i] ? -__builtin_huge_valf() : x[i] * s;
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

void exp_shift_avx2(const float* x, float m, float* p, double* block_sums, int64_t n) {
    const __m256 mv = _mm256_set1_ps(m);
    for (int64_t b = 0; b < n; b += kExpBlock) {
        const int64_t end = b + kExpBlock < n ? b + kExpBlock : n;
        __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // the block's sum in double
        int64_t i = b;
        for (; i + 8 <= end; i += 8) {
            const __m256 e = exp8(_mm256_loadu_ps(x + i), mv);
            _mm256_storeu_ps(p + i, e);
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
        if (i < end) {  // the tail through a padded vector: the same arithmetic (-inf pads give 0)
            alignas(32) float t[8];
            for (int j = 0; j < 8; ++j) t[j] = i + j < end ? x[i + j] : -__builtin_huge_valf();
            const __m256 e = exp8(_mm256_load_ps(t), mv);
            _mm256_store_ps(t, e);
            for (int64_t j = i; j < end; ++j) p[j] = t[j - i];
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
        alignas(32) double s[8];
        _mm256_store_pd(s, lo);
        _mm256_store_pd(s + 4, hi);
        block_sums[b / kExpBlock] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
}

}  // namespace

SoftmaxKernels avx2_softmax_kernels() {
    return {&scale_max_avx2, &exp_shift_avx2};
}

}  // namespace kiln::kernels::cpu
