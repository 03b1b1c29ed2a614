// SmoothQuant scales (quant/smoothquant.h) against a direct computation of
// s_j = max(act_max_j^alpha / w_max_j^(1 - alpha), 1e-5), with w_max over the rows of every weight of
// the group; channels with a zero (or NaN) maximum keep s = 1; alpha 0 and 1; channel_abs_max over
// rows with NaNs; bad alpha and sizes are kInvalidArgument. And the property SmoothQuant is for: on
// activations with a few 30x outlier channels, INT8 per-token activation x per-channel weight
// quantization of (x / s, W diag(s)) has a smaller output error than of (x, W).
#include "quant/smoothquant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kiln::quant {
namespace {

TEST(SmoothQuant, ScalesMatchTheFormula) {
    const int64_t in = 5;
    const std::vector<float> act_max = {2.0f, 0.5f, 0.0f, 8.0f, NAN};
    const std::vector<float> w1 = {0.1f, -0.2f, 0.3f, 0.0f, 1.0f,  //
                                   -0.4f, 0.1f, 0.0f, 0.0f, 1.0f};
    const std::vector<float> w2 = {0.2f, 0.05f, 0.7f, 0.0f, 2.0f};
    const std::vector<std::span<const float>> ws = {w1, w2};
    const double w_max[] = {0.4, 0.2, 0.7, 0.0, 2.0};
    for (double alpha : {0.0, 0.5, 0.85, 1.0}) {
        auto s = smoothquant_scales(act_max, ws, in, alpha);
        ASSERT_TRUE(s.is_ok());
        for (int64_t j = 0; j < in; ++j) {
            const bool degenerate = !(act_max[size_t(j)] > 0) || w_max[j] == 0;
            const double want =
                degenerate ? 1.0 : std::max(std::pow(act_max[size_t(j)], alpha) / std::pow(w_max[j], 1 - alpha), 1e-5);
            EXPECT_NEAR((*s)[size_t(j)], want, 1e-6 * want) << "alpha " << alpha << " channel " << j;
        }
    }
    EXPECT_FALSE(smoothquant_scales(act_max, ws, in, 1.5).is_ok());
    EXPECT_FALSE(smoothquant_scales(act_max, ws, in, NAN).is_ok());
    EXPECT_FALSE(smoothquant_scales(act_max, ws, 4, 0.5).is_ok());
    const std::vector<float> odd(7);
    const std::vector<std::span<const float>> bad = {odd};
    EXPECT_FALSE(smoothquant_scales(act_max, bad, in, 0.5).is_ok());
}

TEST(SmoothQuant, ChannelAbsMax) {
    const std::vector<float> x = {1, -3, NAN, 2, -0.5f, 4};
    const std::vector<float> m = channel_abs_max(x, 2, 3);
    EXPECT_EQ(m, (std::vector<float>{2, 3, 4}));
    EXPECT_EQ(channel_abs_max({}, 0, 2), (std::vector<float>{0, 0}));
}

// Symmetric INT8 of v with one scale (amax / 127), round to nearest.
void fake_quant(std::vector<float>& v, size_t begin, size_t n) {
    float amax = 0;
    for (size_t i = begin; i < begin + n; ++i) amax = std::max(amax, std::fabs(v[i]));
    if (amax == 0) return;
    const float d = amax / 127;
    for (size_t i = begin; i < begin + n; ++i) v[i] = std::nearbyint(v[i] / d) * d;
}

// Output error of y = x W^T with per-token x and per-row W INT8 rounding.
double w8a8_error(std::vector<float> x, std::vector<float> w, int64_t n, int64_t in, int64_t out,
                  const std::vector<float>& x_ref, const std::vector<float>& w_ref) {
    for (int64_t i = 0; i < n; ++i) fake_quant(x, size_t(i * in), size_t(in));
    for (int64_t r = 0; r < out; ++r) fake_quant(w, size_t(r * in), size_t(in));
    double err = 0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < out; ++r) {
            double a = 0, b = 0;
            for (int64_t j = 0; j < in; ++j) {
                a += double(x[size_t(i * in + j)]) * w[size_t(r * in + j)];
                b += double(x_ref[size_t(i * in + j)]) * w_ref[size_t(r * in + j)];
            }
            err += (a - b) * (a - b);
        }
    return err;
}

TEST(SmoothQuant, CutsW8A8ErrorWithOutlierChannels) {
    const int64_t n = 64, in = 128, out = 32;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n * in)), w(size_t(out * in));
    for (float& v : x) v = nd(rng);
    for (float& v : w) v = 0.02f * nd(rng);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j : {3, 40, 77}) x[size_t(i * in + j)] *= 30.0f;
    const std::vector<std::span<const float>> ws = {w};
    auto s = smoothquant_scales(channel_abs_max(x, n, in), ws, in, 0.5);
    ASSERT_TRUE(s.is_ok());
    std::vector<float> xs = x, wsd = w;
    for (size_t i = 0; i < xs.size(); ++i) xs[i] /= (*s)[i % size_t(in)];
    for (size_t i = 0; i < wsd.size(); ++i) wsd[i] *= (*s)[i % size_t(in)];
    const double plain = w8a8_error(x, w, n, in, out, x, w);
    const double smooth = w8a8_error(xs, wsd, n, in, out, x, w);
    EXPECT_LT(smooth, 0.5 * plain) << "plain " << plain << " smoothed " << smooth;
}

}  // namespace
}  // namespace kiln::quant
