// The SwiGLU kernels (kernels/cpu/activation.h) at every ISA this CPU runs against
// kernels::ref::silu_mul (std::exp), over the whole float range, special values and odd lengths.
#include "kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ref/transformer.h"

namespace kiln::kernels::cpu {
namespace {

TEST(Activation, SiluMulNearReferenceOnEveryIsa) {
    std::mt19937 rng(11);
    std::vector<float> g, u;
    // Spread over magnitudes 1e-6 .. 1e2 with both signs, then the edges of exp's range, zeros and
    // the special values.
    std::uniform_real_distribution<float> expo(-6.0f, 2.0f), unit(-1.0f, 1.0f);
    for (int i = 0; i < 20000; ++i) {
        g.push_back((i % 2 ? -1.0f : 1.0f) * std::pow(10.0f, expo(rng)));
        u.push_back(unit(rng) * 3.0f);
    }
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (float v : {0.0f, -0.0f, 86.9f, -86.9f, 87.1f, -87.1f, 88.5f, -88.5f, 89.0f, -89.0f, 1e30f, -1e30f, inf, -inf,
                    nan, 1e-30f, -1e-30f}) {
        g.push_back(v);
        u.push_back(1.5f);
    }
    const int64_t n = int64_t(g.size());
    std::vector<float> want(g.size());
    ref::silu_mul(g.data(), u.data(), want.data(), n);
    for (Isa isa : kAllIsas) {
        if (!isa_supported(isa)) continue;
        const SiluMulFn fn = find_silu_mul_kernel(isa);
        ASSERT_NE(fn, nullptr) << isa_name(isa);
        // Every length up to 20 (the tail) at every start offset mod 8, then the whole array.
        for (int64_t start = 0; start < 8; ++start) {
            for (int64_t len = 0; len <= 20; ++len) {
                std::vector<float> got(size_t(len) + 1, -7.0f);
                fn(g.data() + start, u.data() + start, got.data(), len);
                EXPECT_EQ(got[size_t(len)], -7.0f) << isa_name(isa) << ": wrote past n = " << len;
                for (int64_t i = 0; i < len; ++i) {
                    const float w = want[size_t(start + i)];
                    EXPECT_NEAR(got[size_t(i)], w, 2e-6f * std::abs(w) + 1e-30f) << isa_name(isa) << " i " << i;
                }
            }
        }
        std::vector<float> got(g.size());
        fn(g.data(), u.data(), got.data(), n);
        double worst = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float w = want[size_t(i)], r = got[size_t(i)];
            if (std::isnan(w) || std::isinf(w)) {
                EXPECT_EQ(std::isnan(r), std::isnan(w)) << isa_name(isa) << " g " << g[size_t(i)];
                if (std::isinf(w)) {
                    EXPECT_EQ(r, w) << isa_name(isa) << " g " << g[size_t(i)];
                }
                continue;
            }
            ASSERT_NEAR(r, w, 2e-6f * std::abs(w) + 1e-30f) << isa_name(isa) << " g " << g[size_t(i)];
            if (std::abs(w) > 1e-30f) worst = std::max(worst, std::abs(double(r) - w) / std::abs(w));
        }
        if (isa == Isa::kRef) {
            EXPECT_EQ(worst, 0.0);
        }
        std::printf("[ %s ] worst relative error %.3g\n", isa_name(isa), worst);
        // In place (out aliasing gate) gives the same values.
        std::vector<float> inplace = g;
        fn(inplace.data(), u.data(), inplace.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            if (!std::isnan(got[size_t(i)])) {
                ASSERT_EQ(inplace[size_t(i)], got[size_t(i)]);
            }
        }
    }
}

TEST(Activation, BestKernelIsThatOfBestIsa) {
    EXPECT_EQ(best_silu_mul_kernel(), find_silu_mul_kernel(best_isa()));
}

}  // namespace
}  // namespace kiln::kernels::cpu
