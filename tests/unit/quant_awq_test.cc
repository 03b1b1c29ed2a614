// Checks the AWQ scale search (quant/awq.h): it beats RTN clearly when a few input channels carry
// activation outliers, never does worse than RTN, reports errors that a direct double-precision
// recomputation from the returned scales reproduces, searches several weights sharing one input
// jointly, gives the same bits with and without a thread pool, and rejects bad arguments with a
// Status; awq_search_loss tries RTN first, then the grid, and keeps the first best. Duo scaling follows its formula
// computed directly here. The clipping search (quant/awq_clip.h) never increases its searched error, cuts it on
// heavy-tailed weights, reports what a direct recomputation from the clamped weights gives, and rejects bad arguments.
// The time of SmolLM2-135M-sized searches is a benchmark (bench/awq_bench.cc), not a test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "quant/awq.h"
#include "quant/awq_clip.h"
#include "quant/int_quant.h"

namespace kiln::quant {
namespace {

using Span = std::span<const float>;

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> x(size_t(n), 0.0f);
    for (float& v : x) v = dist(rng);
    return x;
}

// [n, in] Gaussian activations whose listed channels are `factor` times larger (AWQ's salient channels).
std::vector<float> outlier_inputs(int64_t n, int64_t in, const std::vector<int64_t>& channels, float factor,
                                  uint32_t seed) {
    std::vector<float> x = gaussian(n * in, seed);
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t c : channels) x[size_t(i * in + c)] *= factor;
    }
    return x;
}

// The mean squared output error recomputed from scratch in double: W' = dequant(quant(W diag(s))) / s,
// error = mean over the sampled rows (i * n / m) and all outputs of (x W^T - x W'^T)^2.
double direct_error(const std::vector<std::vector<float>>& ws, const std::vector<int64_t>& rows, int64_t in,
                    const std::vector<float>& x, int64_t n, const std::vector<float>& s, const AwqOptions& o) {
    const int64_t m = std::min(n, o.max_samples);
    double sum = 0;
    int64_t total_rows = 0;
    for (size_t k = 0; k < ws.size(); ++k) {
        auto q = quantize_int4_scaled(ws[k], rows[k], in, s, o.group_size, o.mode);
        EXPECT_TRUE(q.is_ok()) << q.status().to_string();
        const std::vector<float> deq = dequantize(*q);
        for (int64_t i = 0; i < m; ++i) {
            const float* xi = x.data() + (i * n / m) * in;
            for (int64_t r = 0; r < rows[k]; ++r) {
                double y = 0, yq = 0;
                for (int64_t j = 0; j < in; ++j) {
                    y += double(xi[j]) * double(ws[k][size_t(r * in + j)]);
                    yq += double(xi[j]) * double(deq[size_t(r * in + j)] / s[size_t(j)]);
                }
                sum += (y - yq) * (y - yq);
            }
        }
        total_rows += rows[k];
    }
    return sum / (double(m) * double(total_rows));
}

core::Result<AwqResult> search(const std::vector<std::vector<float>>& ws, const std::vector<int64_t>& rows, int64_t in,
                               const std::vector<float>& x, int64_t n, const AwqOptions& o,
                               core::ThreadPool* pool = nullptr) {
    std::vector<Span> spans(ws.begin(), ws.end());
    return awq_search(spans, rows, in, x, n, o, pool);
}

double output_error(const std::vector<std::vector<float>>& ws, const std::vector<int64_t>& rows, int64_t in,
                    const std::vector<float>& x, int64_t n, const std::vector<float>& s, const AwqOptions& o) {
    std::vector<Span> spans(ws.begin(), ws.end());
    auto r = awq_output_error(spans, rows, in, x, n, s, o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : std::numeric_limits<double>::quiet_NaN();
}

TEST(QuantAwq, BeatsRtnWithActivationOutliers) {
    const int64_t in = 256, out = 64, n = 128;
    const std::vector<float> w = gaussian(out * in, 1);
    const std::vector<float> x = outlier_inputs(n, in, {3, 50, 101, 200}, 30.0f, 2);
    for (Int4Mode mode : {Int4Mode::kAsymmetric, Int4Mode::kSymmetric}) {
        AwqOptions o;
        o.mode = mode;
        auto r = search({w}, {out}, in, x, n, o);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        std::printf("mode %d: rtn %.6g awq %.6g (ratio %.3f) alpha %.2f\n", int(mode), r->rtn_error, r->awq_error,
                    r->awq_error / r->rtn_error, r->best_alpha);
        EXPECT_LT(r->awq_error, 0.8 * r->rtn_error);
        EXPECT_GT(r->best_alpha, 0.0f);
        ASSERT_EQ(r->scales.size(), size_t(in));
        // The outlier channels get the largest scales.
        for (int64_t c : {3, 50, 101, 200}) {
            for (int64_t j = 0; j < in; ++j) {
                if (j != 3 && j != 50 && j != 101 && j != 200) {
                    EXPECT_GT(r->scales[size_t(c)], r->scales[size_t(j)]);
                }
            }
        }
    }
}

TEST(QuantAwq, NeverWorseThanRtnOnUniformActivations) {
    const int64_t in = 192, out = 48, n = 64;
    for (uint32_t seed : {3u, 4u, 5u}) {
        const std::vector<float> w = gaussian(out * in, seed);
        const std::vector<float> x = gaussian(n * in, seed + 100);
        AwqOptions o;
        o.group_size = 64;
        auto r = search({w}, {out}, in, x, n, o);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        EXPECT_LE(r->awq_error, r->rtn_error) << "seed " << seed;
        EXPECT_GT(r->rtn_error, 0.0);
        if (r->best_alpha == 0.0f) {
            for (float s : r->scales) EXPECT_EQ(s, 1.0f);
        }
    }
}

TEST(QuantAwq, ErrorsMatchDirectRecomputation) {
    struct Case {
        int64_t in, out, n, max_samples, group_size;
        Int4Mode mode;
    };
    // in = 97: odd, a tail after the 8-lane loop and a short last group; max_samples < n: strided rows.
    for (const Case& c :
         {Case{256, 37, 50, 512, 128, Int4Mode::kAsymmetric}, Case{97, 9, 70, 16, 32, Int4Mode::kSymmetric},
          Case{200, 20, 33, 33, 64, Int4Mode::kAsymmetric}}) {
        const std::vector<float> w = gaussian(c.out * c.in, 7);
        const std::vector<float> x = outlier_inputs(c.n, c.in, {1, c.in - 2}, 20.0f, 8);
        AwqOptions o;
        o.group_size = c.group_size;
        o.mode = c.mode;
        o.max_samples = c.max_samples;
        o.grid = 10;
        auto r = search({w}, {c.out}, c.in, x, c.n, o);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        EXPECT_EQ(r->num_samples, std::min(c.n, c.max_samples));
        const double awq_direct = direct_error({w}, {c.out}, c.in, x, c.n, r->scales, o);
        const double rtn_direct = direct_error({w}, {c.out}, c.in, x, c.n, std::vector<float>(size_t(c.in), 1.0f), o);
        EXPECT_NEAR(r->awq_error, awq_direct, 1e-5 * awq_direct) << "in " << c.in;
        EXPECT_NEAR(r->rtn_error, rtn_direct, 1e-5 * rtn_direct) << "in " << c.in;
        // awq_output_error runs the same computation: bit-identical.
        EXPECT_EQ(output_error({w}, {c.out}, c.in, x, c.n, r->scales, o), r->awq_error);
        // The search's scales follow the formula: max(x_mean^alpha, 1e-4) normalized by sqrt(max * min).
        const std::vector<float> mean = channel_mean_abs(x, c.n, c.in);
        std::vector<double> s(size_t(c.in));
        for (int64_t j = 0; j < c.in; ++j)
            s[size_t(j)] = std::max(std::pow(double(mean[size_t(j)]), double(r->best_alpha)), 1e-4);
        const double norm = std::sqrt(*std::min_element(s.begin(), s.end()) * *std::max_element(s.begin(), s.end()));
        for (int64_t j = 0; j < c.in; ++j)
            EXPECT_NEAR(r->scales[size_t(j)], s[size_t(j)] / norm, 1e-5 * s[size_t(j)] / norm);
    }
}

TEST(QuantAwq, SearchesSharedInputJointly) {
    // q/k/v-like: three weights of different heights reading one input.
    const int64_t in = 128, n = 40;
    const std::vector<int64_t> rows = {32, 8, 8};
    const std::vector<std::vector<float>> ws = {gaussian(rows[0] * in, 11), gaussian(rows[1] * in, 12, 3.0f),
                                                gaussian(rows[2] * in, 13, 0.5f)};
    const std::vector<float> x = outlier_inputs(n, in, {5, 77}, 30.0f, 14);
    AwqOptions o;
    o.group_size = 64;
    auto joint = search(ws, rows, in, x, n, o);
    ASSERT_TRUE(joint.is_ok()) << joint.status().to_string();
    ASSERT_EQ(joint->scales.size(), size_t(in));
    EXPECT_LT(joint->awq_error, joint->rtn_error);
    EXPECT_NEAR(joint->awq_error, direct_error(ws, rows, in, x, n, joint->scales, o), 1e-5 * joint->awq_error);
    // The joint error is the row-weighted mean of the per-weight errors under the same scales.
    double weighted = 0;
    for (size_t k = 0; k < ws.size(); ++k) {
        weighted += double(rows[k]) * output_error({ws[k]}, {rows[k]}, in, x, n, joint->scales, o);
    }
    EXPECT_NEAR(joint->awq_error, weighted / 48.0, 1e-9 * joint->awq_error);
    // The joint optimum is no worse, on the joint error, than any single weight's own optimum.
    for (size_t k = 0; k < ws.size(); ++k) {
        auto single = search({ws[k]}, {rows[k]}, in, x, n, o);
        ASSERT_TRUE(single.is_ok());
        EXPECT_LE(joint->awq_error, output_error(ws, rows, in, x, n, single->scales, o)) << "weight " << k;
    }
}

TEST(QuantAwq, ThreadPoolGivesIdenticalResult) {
    const int64_t in = 160, out = 75, n = 30;  // 75 rows: blocks of 16 and 4 with tails
    const std::vector<float> w = gaussian(out * in, 21);
    const std::vector<float> w2 = gaussian(13 * in, 22);
    const std::vector<float> x = outlier_inputs(n, in, {0, 99}, 25.0f, 23);
    AwqOptions o;
    o.group_size = 32;
    o.grid = 8;
    auto serial = search({w, w2}, {out, 13}, in, x, n, o);
    core::ThreadPool pool(3);
    auto parallel = search({w, w2}, {out, 13}, in, x, n, o, &pool);
    ASSERT_TRUE(serial.is_ok() && parallel.is_ok());
    EXPECT_EQ(serial->rtn_error, parallel->rtn_error);
    EXPECT_EQ(serial->awq_error, parallel->awq_error);
    EXPECT_EQ(serial->best_alpha, parallel->best_alpha);
    EXPECT_EQ(serial->scales, parallel->scales);
}

TEST(QuantAwq, ScaledQuantizationEqualsQuantizingScaledCopy) {
    const int64_t rows = 5, cols = 70;
    const std::vector<float> w = gaussian(rows * cols, 31);
    std::vector<float> s = gaussian(cols, 32);
    for (float& v : s) v = std::exp(v);
    std::vector<float> scaled(w.size());
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) scaled[size_t(r * cols + c)] = w[size_t(r * cols + c)] * s[size_t(c)];
    }
    auto a = quantize_int4_scaled(w, rows, cols, s, 32, Int4Mode::kAsymmetric);
    auto b = quantize_int4(scaled, rows, cols, 32, Int4Mode::kAsymmetric);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(a->data, b->data);
    EXPECT_EQ(a->scales, b->scales);
    EXPECT_EQ(a->zeros, b->zeros);
}

TEST(QuantAwq, ChannelMeanAbs) {
    const std::vector<float> x = {1, -2, 0, -3, 4, 0};  // [2, 3]
    EXPECT_EQ(channel_mean_abs(x, 2, 3), (std::vector<float>{2, 3, 0}));
    EXPECT_EQ(channel_mean_abs({}, 0, 3), (std::vector<float>{0, 0, 0}));
}

TEST(QuantAwq, RejectsBadArguments) {
    const int64_t in = 64, out = 8, n = 4;
    const std::vector<float> w = gaussian(out * in, 41);
    const std::vector<float> x = gaussian(n * in, 42);
    const AwqOptions o;  // group 128 > in: one short group per row, allowed
    ASSERT_TRUE(search({w}, {out}, in, x, n, o).is_ok());

    auto expect_invalid = [](const core::Result<AwqResult>& r, const char* what) {
        ASSERT_FALSE(r.is_ok()) << what;
        EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument) << what;
    };
    expect_invalid(search({w}, {out, out}, in, x, n, o), "weights/out_rows count mismatch");
    expect_invalid(search({}, {}, in, x, n, o), "no weights");
    expect_invalid(search({w}, {out + 1}, in, x, n, o), "weight size mismatch");
    expect_invalid(search({w}, {0}, in, x, n, o), "zero rows");
    expect_invalid(search({w}, {-out}, in, x, n, o), "negative rows");
    expect_invalid(search({w}, {out}, in, x, n + 1, o), "x size mismatch");
    expect_invalid(search({w}, {out}, in, {}, 0, o), "n = 0");
    expect_invalid(search({}, {}, 0, {}, 0, o), "in = 0");
    std::vector<float> bad_x = x;
    bad_x[70] = std::numeric_limits<float>::quiet_NaN();
    expect_invalid(search({w}, {out}, in, bad_x, n, o), "NaN in x");
    bad_x[70] = std::numeric_limits<float>::infinity();
    expect_invalid(search({w}, {out}, in, bad_x, n, o), "inf in x");
    std::vector<float> bad_w = w;
    bad_w[3] = -std::numeric_limits<float>::infinity();
    expect_invalid(search({bad_w}, {out}, in, x, n, o), "inf in W");
    AwqOptions bad = o;
    bad.group_size = 48;
    expect_invalid(search({w}, {out}, in, x, n, bad), "group size");
    bad = o;
    bad.grid = 0;
    expect_invalid(search({w}, {out}, in, x, n, bad), "grid 0");
    bad = o;
    bad.max_samples = 0;
    expect_invalid(search({w}, {out}, in, x, n, bad), "max_samples 0");

    const Span ws[] = {w};
    const int64_t rows[] = {out};
    std::vector<float> s(size_t(in), 1.0f);
    EXPECT_TRUE(awq_output_error(ws, rows, in, x, n, s, o).is_ok());
    EXPECT_FALSE(awq_output_error(ws, rows, in, x, n, std::span<const float>(s).first(10), o).is_ok());
    s[5] = 0.0f;
    EXPECT_FALSE(awq_output_error(ws, rows, in, x, n, s, o).is_ok());
    EXPECT_FALSE(quantize_int4_scaled(w, out, in, s, 64, Int4Mode::kSymmetric).is_ok());
    s[5] = -1.0f;
    EXPECT_FALSE(quantize_int4_scaled(w, out, in, s, 64, Int4Mode::kSymmetric).is_ok());
    s[5] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(quantize_int4_scaled(w, out, in, s, 64, Int4Mode::kSymmetric).is_ok());
    s[5] = 1.0f;
    EXPECT_TRUE(quantize_int4_scaled(w, out, in, s, 64, Int4Mode::kSymmetric).is_ok());
    EXPECT_FALSE(quantize_int4_scaled(w, out + 1, in, s, 64, Int4Mode::kSymmetric).is_ok());
}

// Student-t-like weights (a Gaussian divided by a random magnitude): a few large values per group.
std::vector<float> heavy_tailed(int64_t n, uint32_t seed) {
    std::vector<float> w = gaussian(n, seed);
    std::mt19937 rng(seed + 1000);
    std::gamma_distribution<float> chi2(1.5f, 2.0f);  // 3 degrees of freedom
    for (float& v : w) v /= std::sqrt(chi2(rng) / 3.0f);
    return w;
}

TEST(QuantAwq, DuoScalingMatchesDirectComputation) {
    const int64_t in = 100, n = 40, group = 32;  // short last group (100 = 3 * 32 + 4)
    const std::vector<int64_t> rows = {12, 5};
    const std::vector<std::vector<float>> ws = {heavy_tailed(rows[0] * in, 51), gaussian(rows[1] * in, 52, 4.0f)};
    const std::vector<float> x = outlier_inputs(n, in, {2, 60}, 15.0f, 53);
    // w_mean directly: |w| over its group's amax (+ 1e-6), averaged over all 17 rows.
    std::vector<double> w_mean(size_t(in), 0.0);
    for (size_t k = 0; k < ws.size(); ++k) {
        for (int64_t r = 0; r < rows[k]; ++r) {
            for (int64_t j = 0; j < in; ++j) {
                double amax = 0;
                for (int64_t c = j / group * group; c < std::min(in, j / group * group + group); ++c)
                    amax = std::max(amax, std::fabs(double(ws[k][size_t(r * in + c)])));
                w_mean[size_t(j)] += std::fabs(double(ws[k][size_t(r * in + j)])) / (amax + 1e-6) / 17.0;
            }
        }
    }
    const std::vector<Span> spans(ws.begin(), ws.end());
    const std::vector<float> got_mean = awq_weight_mean(spans, rows, in, group);
    for (int64_t j = 0; j < in; ++j) EXPECT_NEAR(got_mean[size_t(j)], w_mean[size_t(j)], 1e-6) << j;
    AwqOptions o;
    o.group_size = group;
    o.duo_scaling = true;
    auto r = search(ws, rows, in, x, n, o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_LE(r->awq_error, r->rtn_error);
    EXPECT_NEAR(r->awq_error, direct_error(ws, rows, in, x, n, r->scales, o), 1e-5 * r->awq_error);
    ASSERT_TRUE(r->scaled) << "outlier channels: some duo candidate should beat RTN";
    const std::vector<float> x_mean = channel_mean_abs(x, n, in);
    const double a = r->best_alpha;
    std::vector<double> s(static_cast<size_t>(in));
    for (int64_t j = 0; j < in; ++j)
        s[size_t(j)] =
            std::max(std::pow(double(x_mean[size_t(j)]), a) / (std::pow(w_mean[size_t(j)], 1 - a) + 1e-4), 1e-4);
    const double norm = std::sqrt(*std::min_element(s.begin(), s.end()) * *std::max_element(s.begin(), s.end()));
    for (int64_t j = 0; j < in; ++j) EXPECT_NEAR(r->scales[size_t(j)], s[size_t(j)] / norm, 1e-4 * s[size_t(j)] / norm);
    // Duo alpha = 0 is not s = 1: the weight term alone.
    const std::vector<float> s0 = awq_scales(x_mean, got_mean, 0.0, true);
    EXPECT_NE(*std::max_element(s0.begin(), s0.end()), *std::min_element(s0.begin(), s0.end()));
}

// The clip search's error recomputed directly in double from the clamped weights: per (row, group),
// sum over the sampled rows of (x_g . (W_g - W'_g))^2, over m * rows.
double direct_clip_error(const std::vector<float>& w, int64_t rows, int64_t in, const std::vector<float>& x, int64_t n,
                         const AwqClipOptions& o, const AwqClipResult* clip) {
    std::vector<float> c = w;
    if (clip) {
        EXPECT_TRUE(apply_awq_clip(c, rows, in, *clip).is_ok());
    }
    auto q = quantize_int4(c, rows, in, o.group_size, o.mode);
    EXPECT_TRUE(q.is_ok());
    const std::vector<float> deq = dequantize(*q);
    const int64_t m = std::min(n, o.max_samples);
    double sum = 0;
    for (int64_t i = 0; i < m; ++i) {
        const float* xi = x.data() + (i * n / m) * in;
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t g0 = 0; g0 < in; g0 += o.group_size) {
                double dot = 0;
                for (int64_t j = g0; j < std::min(in, g0 + o.group_size); ++j)
                    dot += double(xi[j]) * (double(w[size_t(r * in + j)]) - double(deq[size_t(r * in + j)]));
                sum += dot * dot;
            }
        }
    }
    return sum / (double(m) * double(rows));
}

// awq_search_loss with a caller's loss: plain RTN (s = 1) is evaluated first, then one candidate per
// alpha = a / grid (a = 1 .. grid - 1, activation-only) exactly as awq_scales gives them; the first
// smallest loss wins; a non-finite RTN loss or mismatched statistics are kInvalidArgument.
TEST(QuantAwq, SearchWithCallerLossFollowsTheGrid) {
    const std::vector<float> x_mean = {0.5f, 2.0f, 8.0f, 1.0f};
    AwqOptions o;
    o.grid = 10;
    std::vector<std::vector<float>> seen;
    // Lowest at alpha 0.3 and 0.4 (a tie: 0.3 must win); RTN costs 1.
    auto loss = [&](std::span<const float> s) {
        seen.emplace_back(s.begin(), s.end());
        const size_t a = seen.size() - 1;  // candidate index = a (0 = RTN)
        return a == 3 || a == 4 ? 0.25 : 1.0;
    };
    auto r = awq_search_loss(x_mean, {}, o, loss);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(seen.size(), 10u);
    EXPECT_EQ(seen[0], std::vector<float>(4, 1.0f));
    for (int a = 1; a < 10; ++a) EXPECT_EQ(seen[size_t(a)], awq_scales(x_mean, {}, a / 10.0, false)) << a;
    EXPECT_TRUE(r->scaled);
    EXPECT_FLOAT_EQ(r->best_alpha, 0.3f);
    EXPECT_EQ(r->scales, seen[3]);
    EXPECT_EQ(r->rtn_error, 1.0);
    EXPECT_EQ(r->awq_error, 0.25);
    // Nothing beats RTN: s = 1, not scaled.
    auto flat = awq_search_loss(x_mean, {}, o, [](std::span<const float>) { return 2.0; });
    ASSERT_TRUE(flat.is_ok());
    EXPECT_FALSE(flat->scaled);
    EXPECT_EQ(flat->scales, std::vector<float>(4, 1.0f));
    auto bad = [](const core::Result<AwqResult>& x) {
        return !x.is_ok() && x.status().code() == core::StatusCode::kInvalidArgument;
    };
    EXPECT_TRUE(bad(awq_search_loss(x_mean, {}, o, [](std::span<const float>) { return std::nan(""); })));
    o.duo_scaling = true;
    EXPECT_TRUE(bad(awq_search_loss(x_mean, std::vector<float>(3, 1.0f), o, loss)));
}

TEST(QuantAwqClip, NeverIncreasesSearchedErrorAndMatchesDirect) {
    for (Int4Mode mode : {Int4Mode::kAsymmetric, Int4Mode::kSymmetric}) {
        for (uint32_t seed : {61u, 62u}) {
            const int64_t rows = 21, in = 90, n = 50;  // in = 90: a short last group for every size
            const std::vector<float> w = gaussian(rows * in, seed);
            const std::vector<float> x = outlier_inputs(n, in, {4}, 10.0f, seed + 7);
            AwqClipOptions o;
            o.group_size = 32;
            o.mode = mode;
            o.max_samples = 37;
            auto r = awq_clip_search(w, rows, in, x, n, o);
            ASSERT_TRUE(r.is_ok()) << r.status().to_string();
            EXPECT_EQ(r->num_samples, 37);
            EXPECT_LE(r->clip_error, r->base_error);
            EXPECT_NEAR(r->base_error, direct_clip_error(w, rows, in, x, n, o, nullptr), 1e-4 * r->base_error);
            EXPECT_NEAR(r->clip_error, direct_clip_error(w, rows, in, x, n, o, &*r), 1e-4 * r->clip_error);
            for (float c : r->ratio) EXPECT_TRUE(c > 0.5f && c <= 1.0f) << c;
            core::ThreadPool pool(3);
            auto p = awq_clip_search(w, rows, in, x, n, o, &pool);
            ASSERT_TRUE(p.is_ok());
            EXPECT_EQ(p->clip_error, r->clip_error);
            EXPECT_EQ(p->lo, r->lo);
            EXPECT_EQ(p->hi, r->hi);
        }
    }
}

TEST(QuantAwqClip, ReducesErrorOnHeavyTailedWeights) {
    const int64_t rows = 48, in = 256, n = 64;
    const std::vector<float> w = heavy_tailed(rows * in, 71);
    const std::vector<float> x = gaussian(n * in, 72);
    for (Int4Mode mode : {Int4Mode::kAsymmetric, Int4Mode::kSymmetric}) {
        AwqClipOptions o;
        o.group_size = 128;
        o.mode = mode;
        auto r = awq_clip_search(w, rows, in, x, n, o);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        std::printf("clip mode %d: %.6g -> %.6g (%.3f)\n", int(mode), r->base_error, r->clip_error,
                    r->clip_error / r->base_error);
        EXPECT_LT(r->clip_error, 0.9 * r->base_error);
        EXPECT_LT(*std::min_element(r->ratio.begin(), r->ratio.end()), 1.0f);
    }
}

TEST(QuantAwqClip, RejectsBadArguments) {
    const int64_t rows = 4, in = 64, n = 8;
    const std::vector<float> w = gaussian(rows * in, 81);
    const std::vector<float> x = gaussian(n * in, 82);
    const AwqClipOptions o;
    ASSERT_TRUE(awq_clip_search(w, rows, in, x, n, o).is_ok());
    auto invalid = [](const core::Result<AwqClipResult>& r) {
        return !r.is_ok() && r.status().code() == core::StatusCode::kInvalidArgument;
    };
    EXPECT_TRUE(invalid(awq_clip_search(w, rows + 1, in, x, n, o)));
    EXPECT_TRUE(invalid(awq_clip_search(w, rows, in, x, n + 1, o)));
    EXPECT_TRUE(invalid(awq_clip_search(w, 0, in, x, n, o)));
    EXPECT_TRUE(invalid(awq_clip_search(w, rows, in, {}, 0, o)));
    std::vector<float> bad = w;
    bad[9] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(invalid(awq_clip_search(bad, rows, in, x, n, o)));
    for (auto edit : {+[](AwqClipOptions& b) { b.group_size = 16; }, +[](AwqClipOptions& b) { b.grid = 0; },
                      +[](AwqClipOptions& b) { b.max_shrink = 1.0; }, +[](AwqClipOptions& b) { b.max_shrink = -0.1; },
                      +[](AwqClipOptions& b) { b.max_samples = 0; }}) {
        AwqClipOptions b = o;
        edit(b);
        EXPECT_TRUE(invalid(awq_clip_search(w, rows, in, x, n, b)));
    }
    auto r = awq_clip_search(w, rows, in, x, n, o);
    std::vector<float> c = w;
    EXPECT_TRUE(apply_awq_clip(c, rows, in, *r).is_ok());
    EXPECT_FALSE(apply_awq_clip(c, rows + 1, in, *r).is_ok());
    EXPECT_FALSE(apply_awq_clip(std::span<float>(c).first(10), rows, in, *r).is_ok());
    AwqClipResult swapped = *r;
    std::swap(swapped.lo[0], swapped.hi[0]);
    ASSERT_GT(swapped.lo[0], swapped.hi[0]);
    EXPECT_FALSE(apply_awq_clip(c, rows, in, swapped).is_ok());
}

}  // namespace
}  // namespace kiln::quant
