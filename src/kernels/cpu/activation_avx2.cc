// AVX2 + FMA build of the SwiGLU kernel (activation.h; flags: src/kernels/CMakeLists.txt). Exports
// only avx2_silu_mul_kernel.
#include <immintrin.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/simd_avx2.h"

namespace kiln::kernels::cpu {
namespace {

// silu(g) * u for 8 lanes: e = exp(-|g|) in (0, 1], sigmoid(g) = 1 / (1 + e) for g >= 0 and
// e / (1 + e) below. NaN g stays NaN; g = +inf gives inf * u and g = -inf NaN, as the reference.
inline __m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 neg_abs = _mm256_or_ps(g, _mm256_set1_ps(-0.0f));  // -|g|
    const __m256 e = avx2_exp_nonpos(neg_abs);
    const __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {  // the tail through a zero-padded vector, so it gets the same arithmetic
        float g[8] = {}, u[8] = {}, o[8];
        for (int64_t j = i; j < n; ++j) {
            g[j - i] = gate[j];
            u[j - i] = up[j];
        }
        _mm256_storeu_ps(o, silu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        for (int64_t j = i; j < n; ++j) out[j] = o[j - i];
    }
}

}  // namespace

SiluMulFn avx2_silu_mul_kernel() {
    return &silu_mul_avx2;
}

}  // namespace kiln::kernels::cpu
