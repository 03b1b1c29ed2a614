// The sampler's softmax kernels (kernels/cpu/softmax.h) at every ISA this CPU runs against kernels::ref's
// scale_max / exp_shift: the scaling and max exact, exp within a few ulp, block sums within 1e-6,
// special values (NaN, -inf, underflow), every tail length and offset, nothing written past n.
#include "kernels/cpu/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ref/sample.h"

namespace kiln::kernels::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> logits(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-30.0f, 12.0f);
    std::vector<float> x(n);
    for (float& v : x) v = u(rng);
    for (size_t i = 3; i < n; i += 41) x[i] = -kInf;
    for (size_t i = 5; i < n; i += 113) x[i] = std::numeric_limits<float>::quiet_NaN();
    if (n > 20) x[17] = -1e30f, x[19] = 1e-30f, x[20] = -0.0f;
    return x;
}

TEST(Softmax, ScaleMaxExactOnEveryIsa) {
    for (Isa isa : kAllIsas) {
        if (!isa_supported(isa)) continue;
        const SoftmaxKernels k = find_softmax_kernels(isa);
        ASSERT_NE(k.scale_max, nullptr) << isa_name(isa);
        for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 255, 256, 257, 1000, 49152}) {
            for (size_t start : {0, 1, 5}) {
                const std::vector<float> x = logits(n + start + 1, uint32_t(n + start));
                std::vector<float> want(x.begin() + ptrdiff_t(start), x.end()), got = want;
                const float wm = ref::scale_max(want.data(), 1.0f / 0.7f, int64_t(n));
                const float gm = k.scale_max(got.data(), 1.0f / 0.7f, int64_t(n));
                EXPECT_EQ(gm, wm) << isa_name(isa) << " n " << n;
                for (size_t i = 0; i <= n; ++i)  // element n: untouched in both
                    ASSERT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))
                        << isa_name(isa) << " n " << n << " i " << i << ": " << got[i] << " vs " << want[i];
            }
        }
        std::vector<float> none = {-kInf, std::numeric_limits<float>::quiet_NaN(), -kInf};
        EXPECT_EQ(k.scale_max(none.data(), 2.0f, 3), -kInf) << isa_name(isa);
    }
}

TEST(Softmax, ExpShiftNearReferenceOnEveryIsa) {
    for (Isa isa : kAllIsas) {
        if (!isa_supported(isa)) continue;
        const SoftmaxKernels k = find_softmax_kernels(isa);
        ASSERT_NE(k.exp_shift, nullptr) << isa_name(isa);
        for (size_t n : {1, 7, 8, 9, 255, 256, 257, 513, 1000, 49152}) {
            std::vector<float> x = logits(n, uint32_t(n));
            const float m = ref::scale_max(x.data(), 1.0f, int64_t(n));
            const size_t blocks = (n + size_t(kExpBlock) - 1) / size_t(kExpBlock);
            std::vector<float> want(n), got(n + 1, -7.0f);
            std::vector<double> wsum(blocks), gsum(blocks + 1, -7.0);
            ref::exp_shift(x.data(), m, want.data(), wsum.data(), int64_t(n));
            k.exp_shift(x.data(), m, got.data(), gsum.data(), int64_t(n));
            EXPECT_EQ(got[n], -7.0f) << isa_name(isa) << ": wrote past n = " << n;
            EXPECT_EQ(gsum[blocks], -7.0) << isa_name(isa) << ": wrote past the last block";
            for (size_t i = 0; i < n; ++i) {
                // Below exp's normal range (x - m < -87) the SIMD body gives 0, std::exp a denormal.
                ASSERT_NEAR(got[i], want[i], 2e-6f * want[i] + 1.2e-38f) << isa_name(isa) << " i " << i << " x " << x[i];
                if (!std::isfinite(x[i])) EXPECT_EQ(got[i], 0.0f) << isa_name(isa) << " x " << x[i];
            }
            for (size_t b = 0; b < blocks; ++b) ASSERT_NEAR(gsum[b], wsum[b], 1e-6 * wsum[b] + 1e-30) << isa_name(isa) << " block " << b;
        }
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
