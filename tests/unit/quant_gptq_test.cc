// quant/gptq.h: with H = I it is exactly round-to-nearest (quantize_int4); on correlated
// calibration inputs its output error is well below round-to-nearest's; the Hessian and the codes do
// not depend on the thread count; dead columns come out as zeros; bad arguments are errors. Act-order
// equals a textbook Optimal-Brain-Quantizer sweep (the full inverse Hessian, updated after every
// column, in decreasing order of diag H, groups fixed from the original weights) written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "quant/gptq.h"
#include "quant/int_quant.h"

namespace kiln::quant {
namespace {

std::vector<float> normal(size_t n, uint64_t seed, float sd = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v = std::vector<float>(n);
    for (float& x : v) x = d(rng);
    return v;
}

// Calibration rows with correlated channels: x = z A, z standard normal.
std::vector<float> correlated(int64_t n, int64_t cols, uint64_t seed) {
    const std::vector<float> z = normal(size_t(n * cols), seed), a = normal(size_t(cols * cols), seed + 1, 0.3f);
    std::vector<float> x = std::vector<float>(size_t(n * cols), 0.0f);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t k = 0; k < cols; ++k)
            for (int64_t j = 0; j < cols; ++j)
                x[size_t(t * cols + j)] += z[size_t(t * cols + k)] * a[size_t(k * cols + j)];
    return x;
}

// sum over rows t of x and outputs r of (x_t . (w_r - q_r))^2
double output_error(const std::vector<float>& x, int64_t n, const std::vector<float>& w, const std::vector<float>& q,
                    int64_t rows, int64_t cols) {
    double e = 0;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            double d = 0;
            for (int64_t c = 0; c < cols; ++c)
                d += double(x[size_t(t * cols + c)]) * (double(w[size_t(r * cols + c)]) - q[size_t(r * cols + c)]);
            e += d * d;
        }
    return e;
}

core::Result<Int4Matrix> gptq(const std::vector<float>& w, int64_t rows, int64_t cols, const std::vector<double>& h,
                              const GptqOptions& o, core::ThreadPool* pool) {
    KILN_ASSIGN_OR_RETURN(GptqFactor f, gptq_factor(h, cols));
    return gptq_quantize_int4(w, rows, cols, f, o, pool);
}

TEST(Gptq, IdentityHessianIsRoundToNearest) {
    for (Int4Mode mode : {Int4Mode::kSymmetric, Int4Mode::kAsymmetric})
        for (int64_t g : {32, 64, 128}) {
            const int64_t rows = 7, cols = 99;  // a short last group, an odd row of nibbles
            const std::vector<float> w = normal(size_t(rows * cols), uint64_t(g));
            std::vector<double> h(size_t(cols * cols), 0.0);
            for (int64_t i = 0; i < cols; ++i) h[size_t(i * cols + i)] = 1.0;
            GptqOptions o;
            o.group_size = g;
            o.mode = mode;
            auto got = gptq(w, rows, cols, h, o, nullptr);
            ASSERT_TRUE(got.is_ok()) << got.status().to_string();
            auto want = quantize_int4(w, rows, cols, g, mode);
            ASSERT_TRUE(want.is_ok());
            EXPECT_EQ(got->data, want->data) << "g " << g;
            EXPECT_EQ(got->scales, want->scales) << "g " << g;
            EXPECT_EQ(got->zeros, want->zeros) << "g " << g;
        }
}

TEST(Gptq, BeatsRoundToNearestOnCorrelatedInputs) {
    const int64_t n = 512, rows = 48, cols = 96;
    const std::vector<float> x = correlated(n, cols, 3), w = normal(size_t(rows * cols), 4);
    core::ThreadPool pool(2);
    const std::vector<double> h = gptq_hessian(x, n, cols, &pool);
    for (Int4Mode mode : {Int4Mode::kSymmetric, Int4Mode::kAsymmetric}) {
        GptqOptions o;
        o.group_size = 32;
        o.mode = mode;
        auto g1 = gptq(w, rows, cols, h, o, &pool);
        ASSERT_TRUE(g1.is_ok()) << g1.status().to_string();
        auto rtn = quantize_int4(w, rows, cols, 32, mode);
        ASSERT_TRUE(rtn.is_ok());
        const double e_gptq = output_error(x, n, w, dequantize(*g1), rows, cols);
        const double e_rtn = output_error(x, n, w, dequantize(*rtn), rows, cols);
        EXPECT_LT(e_gptq, 0.8 * e_rtn) << "GPTQ " << e_gptq << " vs RTN " << e_rtn;
        auto inline_run = gptq(w, rows, cols, gptq_hessian(x, n, cols, nullptr), o, nullptr);  // any thread count
        ASSERT_TRUE(inline_run.is_ok());
        EXPECT_EQ(inline_run->data, g1->data);
        EXPECT_EQ(inline_run->scales, g1->scales);
        EXPECT_EQ(inline_run->zeros, g1->zeros);
    }
    // the Hessian: symmetric, X^T X / n
    EXPECT_NEAR(h[size_t(3 * cols + 5)], h[size_t(5 * cols + 3)], 1e-12);
    double h35 = 0;
    for (int64_t t = 0; t < n; ++t) h35 += double(x[size_t(t * cols + 3)]) * x[size_t(t * cols + 5)];
    EXPECT_NEAR(h[size_t(3 * cols + 5)], h35 / double(n), 1e-9 * (1 + std::fabs(h35)));
}

// The same algorithm as OBQ / the GPTQ paper's equation (2) writes it, not through the Cholesky factor:
// Hinv = (H + damp)^-1; for each column q in decreasing order of H_qq: quantize w_q, spread
// (w_q - q) / Hinv_qq * Hinv[q, :] over the columns left, and remove q from Hinv
// (Hinv -= Hinv[:, q] Hinv[q, :] / Hinv_qq). Group parameters from the original weights.
std::vector<float> act_order_reference(const std::vector<float>& w, int64_t rows, int64_t cols,
                                       const std::vector<double>& h, int64_t g, Int4Mode mode) {
    const double mean_diag = [&] {
        double s = 0;
        for (int64_t i = 0; i < cols; ++i) s += h[size_t(i * cols + i)];
        return s / double(cols);
    }();
    // Gauss-Jordan inverse of the damped H
    std::vector<double> a = h, inv(size_t(cols * cols), 0.0);
    for (int64_t i = 0; i < cols; ++i) {
        a[size_t(i * cols + i)] += 0.01 * mean_diag;
        inv[size_t(i * cols + i)] = 1.0;
    }
    for (int64_t p = 0; p < cols; ++p) {
        const double d = a[size_t(p * cols + p)];
        for (int64_t j = 0; j < cols; ++j) {
            a[size_t(p * cols + j)] /= d;
            inv[size_t(p * cols + j)] /= d;
        }
        for (int64_t i = 0; i < cols; ++i) {
            if (i == p) continue;
            const double m = a[size_t(i * cols + p)];
            for (int64_t j = 0; j < cols; ++j) {
                a[size_t(i * cols + j)] -= m * a[size_t(p * cols + j)];
                inv[size_t(i * cols + j)] -= m * inv[size_t(p * cols + j)];
            }
        }
    }
    std::vector<int64_t> order = std::vector<int64_t>(size_t(cols));
    for (int64_t i = 0; i < cols; ++i) order[size_t(i)] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return h[size_t(x * cols + x)] > h[size_t(y * cols + y)]; });
    std::vector<float> out = std::vector<float>(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> row(w.begin() + r * cols, w.begin() + (r + 1) * cols), hinv = inv;
        std::vector<Int4Group> params;
        for (int64_t c0 = 0; c0 < cols; c0 += g) {
            const std::vector<float> grp(w.begin() + r * cols + c0, w.begin() + r * cols + std::min(cols, c0 + g));
            params.push_back(int4_group_params(grp, mode));
        }
        std::vector<bool> done(size_t(cols), false);
        for (int64_t q : order) {
            const Int4Group& p = params[size_t(q / g)];
            const float v = int4_value(int4_code(float(row[size_t(q)]), p, mode), p, mode);
            out[size_t(r * cols + q)] = v;
            done[size_t(q)] = true;
            const double dq = hinv[size_t(q * cols + q)], err = (row[size_t(q)] - double(v)) / dq;
            for (int64_t j = 0; j < cols; ++j)
                if (!done[size_t(j)]) row[size_t(j)] -= err * hinv[size_t(q * cols + j)];
            const std::vector<double> col_q(hinv.begin() + q * cols, hinv.begin() + (q + 1) * cols);
            for (int64_t i = 0; i < cols; ++i)
                for (int64_t j = 0; j < cols; ++j) hinv[size_t(i * cols + j)] -= col_q[size_t(i)] * col_q[size_t(j)] / dq;
        }
    }
    return out;
}

TEST(Gptq, ActOrderEqualsTheTextbookSweep) {
    // Correlated inputs whose channels differ in scale, so that the order matters; 80 columns: a short
    // last group at g = 32.
    const int64_t n = 400, rows = 6, cols = 80;
    std::vector<float> x = correlated(n, cols, 21);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < cols; ++c) x[size_t(t * cols + c)] *= 0.2f + float((c * 37) % 17) * 0.3f;
    const std::vector<float> w = normal(size_t(rows * cols), 22);
    core::ThreadPool pool(2);
    const std::vector<double> h = gptq_hessian(x, n, cols, &pool);
    for (Int4Mode mode : {Int4Mode::kSymmetric, Int4Mode::kAsymmetric})
        for (int64_t g : {32, 64}) {
            auto f = gptq_factor(h, cols, 0.01, /*act_order=*/true);
            ASSERT_TRUE(f.is_ok()) << f.status().to_string();
            ASSERT_EQ(int64_t(f->order.size()), cols);
            for (int64_t i = 1; i < cols; ++i)
                EXPECT_GE(h[size_t(f->order[size_t(i - 1)] * (cols + 1))], h[size_t(f->order[size_t(i)] * (cols + 1))]);
            GptqOptions o;
            o.group_size = g;
            o.mode = mode;
            auto got = gptq_quantize_int4(w, rows, cols, *f, o, &pool);
            ASSERT_TRUE(got.is_ok()) << got.status().to_string();
            const std::vector<float> want = act_order_reference(w, rows, cols, h, g, mode), d = dequantize(*got);
            int64_t differ = 0;
            for (size_t i = 0; i < d.size(); ++i) differ += d[i] != want[i];
            EXPECT_EQ(differ, 0) << "g " << g;
            // the group parameters are the round-to-nearest ones of the original weights
            auto rtn = quantize_int4(w, rows, cols, g, mode);
            ASSERT_TRUE(rtn.is_ok());
            EXPECT_EQ(got->scales, rtn->scales);
            EXPECT_EQ(got->zeros, rtn->zeros);
            const double e_act = output_error(x, n, w, d, rows, cols);
            const double e_rtn = output_error(x, n, w, dequantize(*rtn), rows, cols);
            EXPECT_LT(e_act, 0.8 * e_rtn) << "act-order " << e_act << " vs RTN " << e_rtn;
            auto inline_run = gptq_quantize_int4(w, rows, cols, *f, o, nullptr);  // any thread count
            ASSERT_TRUE(inline_run.is_ok());
            EXPECT_EQ(inline_run->data, got->data);
        }
    // a dead column goes last and comes out zero
    std::vector<float> xd = x;
    for (int64_t t = 0; t < n; ++t) xd[size_t(t * cols + 3)] = 0.0f;
    auto fd = gptq_factor(gptq_hessian(xd, n, cols, nullptr), cols, 0.01, true);
    ASSERT_TRUE(fd.is_ok());
    EXPECT_EQ(fd->order.back(), 3);
    GptqOptions o;
    o.group_size = 32;
    auto qd = gptq_quantize_int4(w, rows, cols, *fd, o, nullptr);
    ASSERT_TRUE(qd.is_ok());
    const std::vector<float> dd = dequantize(*qd);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(dd[size_t(r * cols + 3)], 0.0f) << r;
}

TEST(Gptq, DeadColumnsAreZero) {
    const int64_t n = 200, rows = 5, cols = 64;
    std::vector<float> x = correlated(n, cols, 9);
    for (int64_t t = 0; t < n; ++t) x[size_t(t * cols + 10)] = 0.0f;  // column 10 never sees a signal
    const std::vector<float> w = normal(size_t(rows * cols), 10);
    const std::vector<double> h = gptq_hessian(x, n, cols, nullptr);
    GptqOptions o;
    o.group_size = 32;
    o.mode = Int4Mode::kAsymmetric;
    auto q = gptq(w, rows, cols, h, o, nullptr);
    ASSERT_TRUE(q.is_ok()) << q.status().to_string();
    const std::vector<float> d = dequantize(*q);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(d[size_t(r * cols + 10)], 0.0f) << r;
}

TEST(Gptq, BadArguments) {
    const std::vector<float> w(64, 0.5f);
    const std::vector<double> h(64 * 64, 0.0), small(10, 1.0);
    EXPECT_EQ(gptq_factor(small, 64).status().code(), core::StatusCode::kInvalidArgument);
    auto f = gptq_factor(h, 64);  // every column dead: a valid factor, zeros out
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    GptqOptions o;
    o.group_size = 48;
    EXPECT_EQ(gptq_quantize_int4(w, 1, 64, *f, o, nullptr).status().code(), core::StatusCode::kInvalidArgument);
    o.group_size = 32;
    std::vector<float> nan = w;
    nan[3] = std::nanf("");
    EXPECT_EQ(gptq_quantize_int4(nan, 1, 64, *f, o, nullptr).status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_EQ(gptq_quantize_int4(std::vector<float>(62, 0.5f), 1, 62, *f, o, nullptr).status().code(),
              core::StatusCode::kInvalidArgument);  // the factor is for 64 columns
    auto zeros = gptq_quantize_int4(w, 1, 64, *f, o, nullptr);
    ASSERT_TRUE(zeros.is_ok());
    for (float v : dequantize(*zeros)) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kiln::quant
