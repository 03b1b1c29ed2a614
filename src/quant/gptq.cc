// GPTQ for groupwise INT4 (see gptq.h). Dense double-precision Cholesky factorizations of the
// [cols, cols] Hessian: O(cols^3) once per input (gptq_factor), then O(rows * cols^2) per matrix.
#include "quant/gptq.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "quant/common.h"

namespace kiln::quant {
namespace {

// a [n, n] symmetric -> its lower Cholesky factor in place (the upper triangle is left as is);
// false when a pivot is not positive.
bool cholesky_lower(std::vector<double>& a, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        double d = a[size_t(j * n + j)];
        for (int64_t k = 0; k < j; ++k) d -= a[size_t(j * n + k)] * a[size_t(j * n + k)];
        if (!(d > 0.0)) return false;
        const double ljj = std::sqrt(d);
        a[size_t(j * n + j)] = ljj;
        for (int64_t i = j + 1; i < n; ++i) {
            double v = a[size_t(i * n + j)];
            for (int64_t k = 0; k < j; ++k) v -= a[size_t(i * n + k)] * a[size_t(j * n + k)];
            a[size_t(i * n + j)] = v / ljj;
        }
    }
    return true;
}

// The upper factor U of H^-1 = U^T U, from H's lower Cholesky factor L (H = L L^T):
// H^-1 = L^-T L^-1, then U = chol(H^-1)^T. Returns false when H^-1 is not positive definite.
bool inverse_upper_factor(const std::vector<double>& l, int64_t n, std::vector<double>& u) {
    // t = (L^-1)^T, upper triangular: t[j][k] = (L^-1)[k][j], so every sum below runs along a row.
    std::vector<double> t = std::vector<double>(size_t(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
        const double* li = l.data() + i * n;
        t[size_t(i * n + i)] = 1.0 / li[i];
        for (int64_t j = 0; j < i; ++j) {  // (L^-1)[i][j] = -sum_{k=j}^{i-1} L[i][k] (L^-1)[k][j] / L[i][i]
            const double* tj = t.data() + j * n;
            double v = 0.0;
            for (int64_t k = j; k < i; ++k) v += li[k] * tj[k];
            t[size_t(j * n + i)] = -v / li[i];
        }
    }
    std::vector<double> hinv = std::vector<double>(size_t(n * n));  // (L^-1)^T L^-1
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j <= i; ++j) {  // sum_{k>=i} (L^-1)[k][i] (L^-1)[k][j]
            const double *ti = t.data() + i * n, *tj = t.data() + j * n;
            double v = 0.0;
            for (int64_t k = i; k < n; ++k) v += ti[k] * tj[k];
            hinv[size_t(i * n + j)] = hinv[size_t(j * n + i)] = v;
        }
    if (!cholesky_lower(hinv, n)) return false;
    u.assign(size_t(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i; j < n; ++j) u[size_t(i * n + j)] = hinv[size_t(j * n + i)];
    return true;
}

}  // namespace

std::vector<double> gptq_hessian(std::span<const float> x, int64_t n, int64_t cols, core::ThreadPool* pool) {
    KILN_CHECK(n >= 0 && cols >= 0 && int64_t(x.size()) >= n * cols) << "gptq_hessian: " << n << " x " << cols;
    std::vector<double> h = std::vector<double>(size_t(cols * cols), 0.0);
    if (n == 0) return h;
    // Row i's lower part H[i, 0..i], each entry summed over the samples in order (H is symmetric:
    // the upper part is mirrored after). Rows go in pairs (p, cols - 1 - p), so every job has the
    // same work.
    auto row = [&](int64_t i) {
        double* hi = h.data() + i * cols;
        for (int64_t t = 0; t < n; ++t) {
            const double xi = x[size_t(t * cols + i)];
            if (xi == 0.0) continue;
            const float* xt = x.data() + t * cols;
            for (int64_t j = 0; j <= i; ++j) hi[j] += xi * double(xt[j]);
        }
    };
    auto pairs = [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
            row(p);
            if (cols - 1 - p != p) row(cols - 1 - p);
        }
    };
    if (pool) {
        pool->parallel_for((cols + 1) / 2, pairs);
    } else {
        pairs(0, (cols + 1) / 2);
    }
    for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = 0; j <= i; ++j) {
            const double v = h[size_t(i * cols + j)] / double(n);
            h[size_t(i * cols + j)] = h[size_t(j * cols + i)] = v;
        }
    return h;
}

core::Result<GptqFactor> gptq_factor(std::span<const double> hessian, int64_t cols, double damp, bool act_order) {
    if (cols <= 0 || int64_t(hessian.size()) != cols * cols)
        return core::error(core::StatusCode::kInvalidArgument)
               << "gptq: Hessian of " << hessian.size() << " values for " << cols << " columns";
    // Dead columns (no calibration signal) get H_ii = 1 (their weights are zeroed); then the damping.
    GptqFactor f;
    f.cols = cols;
    f.dead.assign(size_t(cols), 0);
    std::vector<double> h(hessian.begin(), hessian.end());
    double mean_diag = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
        double& d = h[size_t(i * cols + i)];
        if (!(d > 0.0)) {
            f.dead[size_t(i)] = 1;
            for (int64_t j = 0; j < cols; ++j) h[size_t(i * cols + j)] = h[size_t(j * cols + i)] = 0.0;
            d = 1.0;
        }
        mean_diag += d;
    }
    mean_diag /= double(cols);
    if (act_order) {  // decreasing H_ii of the calibration (dead columns, H_ii = 0, last); ties by index
        f.order.resize(size_t(cols));
        for (int64_t i = 0; i < cols; ++i) f.order[size_t(i)] = i;
        auto energy = [&](int64_t i) { return f.dead[size_t(i)] ? 0.0 : hessian[size_t(i * cols + i)]; };
        std::stable_sort(f.order.begin(), f.order.end(), [&](int64_t a, int64_t b) { return energy(a) > energy(b); });
        std::vector<double> p = std::vector<double>(size_t(cols * cols));
        for (int64_t i = 0; i < cols; ++i)
            for (int64_t j = 0; j < cols; ++j)
                p[size_t(i * cols + j)] = h[size_t(f.order[size_t(i)] * cols + f.order[size_t(j)])];
        h = std::move(p);
    }
    for (int attempt = 0; attempt < 4; ++attempt) {
        std::vector<double> l = h;
        for (int64_t i = 0; i < cols; ++i) l[size_t(i * cols + i)] += damp * std::pow(10.0, attempt) * mean_diag;
        if (cholesky_lower(l, cols) && inverse_upper_factor(l, cols, f.u)) return f;
    }
    return core::error(core::StatusCode::kInternal) << "gptq: the Hessian stays indefinite after damping";
}

core::Result<Int4Matrix> gptq_quantize_int4(std::span<const float> w, int64_t rows, int64_t cols, const GptqFactor& f,
                                            const GptqOptions& o, core::ThreadPool* pool) {
    const int64_t g = o.group_size;
    if (g != 32 && g != 64 && g != 128)
        return core::error(core::StatusCode::kInvalidArgument) << "gptq: group size " << g << " (32, 64 or 128)";
    KILN_RETURN_IF_ERROR(check_matrix(w, rows, cols, "gptq", /*require_finite=*/true));
    if (f.cols != cols || int64_t(f.u.size()) != cols * cols || int64_t(f.dead.size()) != cols)
        return core::error(core::StatusCode::kInvalidArgument)
               << "gptq: a factor for " << f.cols << " columns, weights of " << cols;
    Int4Matrix m = empty_int4(rows, cols, g, o.mode);
    const int64_t num_groups = m.groups_per_row();
    const bool act_order = !f.order.empty();
    if (act_order && int64_t(f.order.size()) != cols)
        return core::error(core::StatusCode::kInvalidArgument) << "gptq: an order of " << f.order.size() << " columns";
    auto run = [&](int64_t begin, int64_t end) {
        std::vector<double> row = std::vector<double>(size_t(cols));
        std::vector<float> group = std::vector<float>(size_t(g));
        std::vector<Int4Group> params = std::vector<Int4Group>(size_t(num_groups));
        for (int64_t r = begin; r < end; ++r) {
            for (int64_t c = 0; c < cols; ++c)
                row[size_t(c)] = f.dead[size_t(c)] ? 0.0 : double(w[size_t(r * cols + c)]);
            const std::span<uint8_t> out(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
            // A group's parameters from its weights as they are now: every group up front (act-order),
            // else each at its first column, after the updates from the columns before it.
            auto set_params = [&](int64_t k) {
                const int64_t c0 = k * g, n = std::min(g, cols - c0);
                for (int64_t e = 0; e < n; ++e) group[size_t(e)] = float(row[size_t(c0 + e)]);
                params[size_t(k)] = int4_group_params(std::span<const float>(group.data(), size_t(n)), o.mode);
                m.scales[size_t(r * num_groups + k)] = params[size_t(k)].scale;
                if (o.mode == Int4Mode::kAsymmetric) m.zeros[size_t(r * num_groups + k)] = params[size_t(k)].zero;
            };
            if (act_order)
                for (int64_t k = 0; k < num_groups; ++k) set_params(k);
            for (int64_t i = 0; i < cols; ++i) {  // i: the processing position; c: its column of W
                const int64_t c = act_order ? f.order[size_t(i)] : i;
                if (!act_order && c % g == 0) set_params(c / g);
                const Int4Group& p = params[size_t(c / g)];
                const uint8_t code = int4_code(float(row[size_t(c)]), p, o.mode);
                set_nibble(out, c, code);
                const double err = (row[size_t(c)] - double(int4_value(code, p, o.mode))) / f.u[size_t(i * cols + i)];
                const double* ui = f.u.data() + i * cols;
                if (act_order) {
                    for (int64_t j = i + 1; j < cols; ++j) row[size_t(f.order[size_t(j)])] -= err * ui[j];
                } else {
                    for (int64_t j = i + 1; j < cols; ++j) row[size_t(j)] -= err * ui[j];
                }
            }
        }
    };
    if (pool) {
        pool->parallel_for(rows, run);
    } else {
        run(0, rows);
    }
    return m;
}

}  // namespace kiln::quant
