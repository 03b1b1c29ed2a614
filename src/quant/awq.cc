// AWQ scale search (see awq.h for the algorithm and the folding contract).
// The error of a candidate is computed as x (W - W')^T rather than x W^T - x W'^T: the same quantity,
// without a reference pass and without the cancellation of subtracting two nearly equal outputs.
// Work is split over output rows; each row's error is its own double, summed in row order afterwards,
// so the result is the same for every thread count.
#include "quant/awq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "quant/common.h"

namespace kiln::quant {
namespace {

using core::StatusCode;

// Rows quantized and checked together: their scaled copy, dequantized copy and difference (3 x 16 x
// in floats) stay in L2 while every sample row streams past them.
constexpr int64_t kRowBlock = 16;
constexpr int kLanes = 8;  // independent partial sums per dot product (two Float4 registers)

// Validated inputs: the weights with their first global row, and the sampled rows of x.
struct Problem {
    std::vector<std::span<const float>> weights;
    std::vector<int64_t> rows;       // [num_weights] out_k
    std::vector<int64_t> row_begin;  // [num_weights + 1] prefix sums of rows
    int64_t in = 0;
    std::vector<float> xs;  // [num_samples, in]
    int64_t num_samples = 0;
};

core::Status check_options(const AwqOptions& o) {
    if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq: group size " << o.group_size << " (expected 32, 64 or 128)";
    }
    if (o.grid < 1) return core::error(StatusCode::kInvalidArgument) << "awq: grid " << o.grid << " (expected >= 1)";
    if (o.max_samples < 1) {
        return core::error(StatusCode::kInvalidArgument) << "awq: max_samples " << o.max_samples << " (expected >= 1)";
    }
    return core::Status::ok();
}

core::Status check_scales(std::span<const float> scales, int64_t in, const char* what) {
    if (int64_t(scales.size()) != in) {
        return core::error(StatusCode::kInvalidArgument)
               << what << ": " << scales.size() << " scales for " << in << " input channels";
    }
    for (size_t j = 0; j < scales.size(); ++j) {
        if (!(scales[j] > 0) || !std::isfinite(scales[j])) {
            return core::error(StatusCode::kInvalidArgument)
                   << what << ": scale " << scales[j] << " at channel " << j << " (expected positive and finite)";
        }
    }
    return core::Status::ok();
}

core::Result<Problem> make_problem(std::span<const std::span<const float>> weights, std::span<const int64_t> out_rows,
                                   int64_t in, std::span<const float> x, int64_t n, const AwqOptions& o) {
    KILN_RETURN_IF_ERROR(check_options(o));
    if (weights.empty() || weights.size() != out_rows.size()) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq: " << weights.size() << " weights with " << out_rows.size() << " row counts";
    }
    if (in < 1 || n < 1) {
        return core::error(StatusCode::kInvalidArgument) << "awq: in = " << in << ", n = " << n << " (expected >= 1)";
    }
    Problem p;
    p.in = in;
    p.row_begin.push_back(0);
    for (size_t k = 0; k < weights.size(); ++k) {
        if (out_rows[k] < 1) {
            return core::error(StatusCode::kInvalidArgument)
                   << "awq: weight " << k << " has " << out_rows[k] << " rows";
        }
        KILN_RETURN_IF_ERROR(check_matrix(weights[k], out_rows[k], in, "awq weight", /*require_finite=*/true));
        p.weights.push_back(weights[k]);
        p.rows.push_back(out_rows[k]);
        p.row_begin.push_back(p.row_begin.back() + out_rows[k]);
    }
    KILN_RETURN_IF_ERROR(check_matrix(x, n, in, "awq input x", /*require_finite=*/true));
    // Evenly strided rows: row i * n / m for i < m, distinct because n / m >= 1.
    p.num_samples = std::min(n, o.max_samples);
    p.xs.resize(size_t(p.num_samples * in));
    for (int64_t i = 0; i < p.num_samples; ++i) {
        const int64_t src = i * n / p.num_samples;
        std::copy_n(x.begin() + src * in, in, p.xs.begin() + i * in);
    }
    return p;
}

// Four floats in one SSE register: a GCC/Clang vector extension with no ISA-specific intrinsic (plain
// x86-64 or any other target), whose lane-wise + and * are the IEEE float operations. GCC keeps local
// float arrays of partial sums on the stack (2-3x slower); these vectors stay in registers.
using Float4 = float __attribute__((vector_size(16)));

Float4 load4(const float* p) {
    Float4 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// err[r] = sum over samples i of (xs[i] . d[r])^2 for R rows of d [R, in]. Float products in kLanes
// independent partial sums per row, each dot product finished in double.
template <int R>
void row_errors(const float* d, int64_t in, const float* xs, int64_t num_samples, double* err) {
    constexpr int kVecs = kLanes / 4;
    double sum[R] = {};
    const int64_t in_main = in - in % kLanes;
    for (int64_t i = 0; i < num_samples; ++i) {
        const float* xi = xs + i * in;
        Float4 acc[R][kVecs] = {};
        for (int64_t j = 0; j < in_main; j += kLanes) {
            Float4 xv[kVecs];
            for (int v = 0; v < kVecs; ++v) xv[v] = load4(xi + j + 4 * v);
            for (int r = 0; r < R; ++r) {
                for (int v = 0; v < kVecs; ++v) acc[r][v] += load4(d + r * in + j + 4 * v) * xv[v];
            }
        }
        for (int r = 0; r < R; ++r) {
            double dot = 0;
            for (int v = 0; v < kVecs; ++v) {
                for (int l = 0; l < 4; ++l) dot += double(acc[r][v][l]);
            }
            for (int64_t j = in_main; j < in; ++j) dot += double(d[r * in + j]) * double(xi[j]);
            sum[r] += dot * dot;
        }
    }
    for (int r = 0; r < R; ++r) err[r] = sum[r];
}

// Rows [r0, r1) of one weight: quantize W * diag(s), form D = W - dequant / s, accumulate the squared
// output errors into err[0 .. r1 - r0). False if the scaled rows cannot be quantized (overflow to inf).
bool block_errors(const Problem& p, std::span<const float> w, int64_t r0, int64_t r1, std::span<const float> s,
                  const AwqOptions& o, std::vector<float>& scratch, double* err) {
    const int64_t in = p.in;
    const int64_t rows = r1 - r0;
    scratch.resize(size_t(rows * in));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < in; ++j) scratch[size_t(r * in + j)] = w[size_t((r0 + r) * in + j)] * s[size_t(j)];
    }
    core::Result<Int4Matrix> q = quantize_int4(scratch, rows, in, o.group_size, o.mode);
    if (!q.is_ok()) return false;
    const std::vector<float> deq = dequantize(*q);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < in; ++j) {
            const size_t i = size_t(r * in + j);
            scratch[i] = w[size_t((r0 + r) * in + j)] - deq[i] / s[size_t(j)];
        }
    }
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) row_errors<4>(scratch.data() + r * in, in, p.xs.data(), p.num_samples, err + r);
    for (; r < rows; ++r) row_errors<1>(scratch.data() + r * in, in, p.xs.data(), p.num_samples, err + r);
    return true;
}

// The mean squared output error for scales s, or +inf if some scaled row cannot be quantized.
double output_error(const Problem& p, std::span<const float> s, const AwqOptions& o, core::ThreadPool* pool) {
    const int64_t total_rows = p.row_begin.back();
    std::vector<double> row_err(size_t(total_rows), 0.0);
    std::vector<char> row_ok(size_t(total_rows), 1);
    auto run = [&](int64_t begin, int64_t end) {
        std::vector<float> scratch;
        for (size_t k = 0; k < p.weights.size(); ++k) {
            const int64_t lo = std::max(begin, p.row_begin[k]);
            const int64_t hi = std::min(end, p.row_begin[k + 1]);
            for (int64_t g = lo; g < hi; g += kRowBlock) {
                const int64_t g_end = std::min(hi, g + kRowBlock);
                const int64_t r0 = g - p.row_begin[k];
                const int64_t r1 = g_end - p.row_begin[k];
                if (!block_errors(p, p.weights[k], r0, r1, s, o, scratch, row_err.data() + g)) {
                    std::fill(row_ok.begin() + g, row_ok.begin() + g_end, 0);
                }
            }
        }
    };
    if (pool != nullptr) {
        pool->parallel_for(total_rows, run, kRowBlock);
    } else {
        run(0, total_rows);
    }
    double sum = 0;
    for (int64_t r = 0; r < total_rows; ++r) {
        if (!row_ok[size_t(r)]) return std::numeric_limits<double>::infinity();
        sum += row_err[size_t(r)];
    }
    return sum / (double(p.num_samples) * double(total_rows));
}

}  // namespace

std::vector<float> channel_mean_abs(std::span<const float> x, int64_t n, int64_t in) {
    KILN_CHECK(n >= 0 && in >= 0 && int64_t(x.size()) == n * in)
        << "channel_mean_abs: " << x.size() << " values for [" << n << ", " << in << "]";
    std::vector<double> sum(size_t(in), 0.0);
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < in; ++j) sum[size_t(j)] += std::fabs(double(x[size_t(i * in + j)]));
    }
    std::vector<float> mean(size_t(in), 0.0f);
    if (n > 0) {
        for (int64_t j = 0; j < in; ++j) mean[size_t(j)] = float(sum[size_t(j)] / double(n));
    }
    return mean;
}

std::vector<float> awq_weight_mean(std::span<const std::span<const float>> weights, std::span<const int64_t> out_rows,
                                   int64_t in, int64_t group_size) {
    KILN_CHECK(weights.size() == out_rows.size() && in >= 1 && group_size >= 1) << "awq_weight_mean: bad sizes";
    std::vector<double> sum(size_t(in), 0.0);
    int64_t total_rows = 0;
    for (size_t k = 0; k < weights.size(); ++k) {
        KILN_CHECK(int64_t(weights[k].size()) == out_rows[k] * in) << "awq_weight_mean: weight " << k << " size";
        for (int64_t r = 0; r < out_rows[k]; ++r) {
            const float* row = weights[k].data() + r * in;
            for (int64_t g0 = 0; g0 < in; g0 += group_size) {
                const int64_t g1 = std::min(in, g0 + group_size);
                float amax = 0;
                for (int64_t j = g0; j < g1; ++j) amax = std::max(amax, std::fabs(row[j]));
                const double denom = double(amax) + 1e-6;
                for (int64_t j = g0; j < g1; ++j) sum[size_t(j)] += std::fabs(double(row[j])) / denom;
            }
        }
        total_rows += out_rows[k];
    }
    std::vector<float> mean(size_t(in), 0.0f);
    if (total_rows > 0) {
        for (int64_t j = 0; j < in; ++j) mean[size_t(j)] = float(sum[size_t(j)] / double(total_rows));
    }
    return mean;
}

// Computed in double, stored as float; a non-finite candidate (overflow) becomes 1, as AutoAWQ does.
std::vector<float> awq_scales(std::span<const float> x_mean, std::span<const float> w_mean, double alpha, bool duo) {
    KILN_CHECK(!duo || w_mean.size() == x_mean.size()) << "awq_scales: " << w_mean.size() << " w_mean values";
    std::vector<double> s(x_mean.size());
    for (size_t j = 0; j < s.size(); ++j) {
        double v = std::pow(double(x_mean[j]), alpha);
        if (duo) v /= std::pow(double(w_mean[j]), 1.0 - alpha) + 1e-4;
        s[j] = std::max(v, 1e-4);
    }
    std::vector<float> out(s.size(), 1.0f);
    if (s.empty()) return out;
    const auto [mn, mx] = std::minmax_element(s.begin(), s.end());
    const double norm = std::sqrt(*mn * *mx);
    for (size_t j = 0; j < s.size(); ++j) {
        const float v = float(s[j] / norm);
        out[j] = std::isfinite(v) && v > 0 ? v : 1.0f;
    }
    return out;
}

core::Result<AwqResult> awq_search_loss(std::span<const float> x_mean, std::span<const float> w_mean,
                                        const AwqOptions& options, const AwqLoss& loss) {
    KILN_RETURN_IF_ERROR(check_options(options));
    if (x_mean.empty() || (options.duo_scaling && w_mean.size() != x_mean.size())) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq: " << x_mean.size() << " activation and " << w_mean.size() << " weight statistics";
    }
    AwqResult best;
    best.scales.assign(x_mean.size(), 1.0f);
    // s = 1 exactly: plain RTN, which must be finite for finite inputs.
    best.rtn_error = loss(best.scales);
    if (!std::isfinite(best.rtn_error)) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq: the RTN output error is not finite (inputs too large)";
    }
    best.awq_error = best.rtn_error;
    // Activation-only alpha = 0 is s = 1, already evaluated.
    for (int a = options.duo_scaling ? 0 : 1; a < options.grid; ++a) {
        const double alpha = double(a) / double(options.grid);
        std::vector<float> s = awq_scales(x_mean, w_mean, alpha, options.duo_scaling);
        const double err = loss(s);
        if (err < best.awq_error) {
            best.awq_error = err;
            best.best_alpha = float(alpha);
            best.scaled = true;
            best.scales = std::move(s);
        }
    }
    return best;
}

core::Result<AwqResult> awq_search(std::span<const std::span<const float>> weights, std::span<const int64_t> out_rows,
                                   int64_t in, std::span<const float> x, int64_t n, const AwqOptions& options,
                                   core::ThreadPool* pool) {
    KILN_ASSIGN_OR_RETURN(const Problem p, make_problem(weights, out_rows, in, x, n, options));
    const std::vector<float> x_mean = channel_mean_abs(x, n, in);
    std::vector<float> w_mean;
    if (options.duo_scaling) w_mean = awq_weight_mean(weights, out_rows, in, options.group_size);
    KILN_ASSIGN_OR_RETURN(AwqResult best, awq_search_loss(x_mean, w_mean, options, [&](std::span<const float> s) {
                              return output_error(p, s, options, pool);
                          }));
    best.num_samples = p.num_samples;
    return best;
}

core::Result<double> awq_output_error(std::span<const std::span<const float>> weights,
                                      std::span<const int64_t> out_rows, int64_t in, std::span<const float> x,
                                      int64_t n, std::span<const float> scales, const AwqOptions& options,
                                      core::ThreadPool* pool) {
    KILN_ASSIGN_OR_RETURN(const Problem p, make_problem(weights, out_rows, in, x, n, options));
    KILN_RETURN_IF_ERROR(check_scales(scales, in, "awq_output_error"));
    const double err = output_error(p, scales, options, pool);
    if (!std::isfinite(err)) {
        return core::error(StatusCode::kInvalidArgument) << "awq_output_error: scaled weights or errors overflow";
    }
    return err;
}

core::Result<Int4Matrix> quantize_int4_scaled(std::span<const float> w, int64_t rows, int64_t cols,
                                              std::span<const float> scales, int64_t group_size, Int4Mode mode) {
    KILN_RETURN_IF_ERROR(check_matrix(w, rows, cols, "quantize_int4_scaled", /*require_finite=*/true));
    KILN_RETURN_IF_ERROR(check_scales(scales, cols, "quantize_int4_scaled"));
    std::vector<float> scaled(w.size());
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            scaled[size_t(r * cols + c)] = w[size_t(r * cols + c)] * scales[size_t(c)];
        }
    }
    return quantize_int4(scaled, rows, cols, group_size, mode);
}

}  // namespace kiln::quant
