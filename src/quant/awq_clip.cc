// AWQ weight clipping search (see awq_clip.h). Rows are processed in blocks: for each candidate ratio
// the block is clamped group by group, quantized in one quantize_int4 call and dequantized, and every
// group's error against the sampled inputs is compared with its best so far. Each row's results are
// its own, so the outcome does not depend on the thread count.
#include "quant/awq_clip.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/common.h"

namespace kiln::quant {
namespace {

using core::StatusCode;

constexpr int64_t kRowBlock = 16;

core::Status check_options(const AwqClipOptions& o) {
    if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq_clip: group size " << o.group_size << " (expected 32, 64 or 128)";
    }
    if (o.grid < 1)
        return core::error(StatusCode::kInvalidArgument) << "awq_clip: grid " << o.grid << " (expected >= 1)";
    if (!(o.max_shrink >= 0 && o.max_shrink < 1)) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq_clip: max_shrink " << o.max_shrink << " (expected in [0, 1))";
    }
    if (o.max_samples < 1) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq_clip: max_samples " << o.max_samples << " (expected >= 1)";
    }
    return core::Status::ok();
}

// The clamp range of one group for ratio c (awq_clip.h).
void group_range(const float* w, int64_t len, Int4Mode mode, float c, float* lo, float* hi) {
    float mn = 0, mx = 0;  // the zero-including range, or amax for symmetric
    for (int64_t j = 0; j < len; ++j) {
        mn = std::min(mn, w[j]);
        mx = std::max(mx, w[j]);
    }
    if (mode == Int4Mode::kSymmetric) {
        const float amax = std::max(-mn, mx) * c;
        *lo = -amax;
        *hi = amax;
    } else {
        *lo = mn * c;
        *hi = mx * c;
    }
}

struct Search {
    const float* w;
    int64_t in, groups;
    const std::vector<float>* xs;  // [m, in]
    int64_t m;
    const AwqClipOptions* o;
    int num_ratios;
};

// Rows [r0, r1): the best ratio per group. best_err / base_err [rows * groups] hold the per-group
// errors; lo / hi / ratio the chosen ranges. False if quantization failed (cannot happen on finite W).
bool search_block(const Search& s, int64_t r0, int64_t r1, AwqClipResult& res, std::vector<double>& best_err,
                  std::vector<double>& base_err) {
    const int64_t in = s.in, G = s.groups, gs = s.o->group_size, rows = r1 - r0;
    std::vector<float> clamped(size_t(rows * in)), lo(size_t(rows * G)), hi(size_t(rows * G));
    std::vector<double> err(size_t(rows * G));
    for (int i = 0; i < s.num_ratios; ++i) {
        const float c = float(1.0 - double(i) / double(s.o->grid));
        for (int64_t r = 0; r < rows; ++r) {
            const float* wr = s.w + (r0 + r) * in;
            for (int64_t g = 0; g < G; ++g) {
                const int64_t j0 = g * gs, j1 = std::min(in, j0 + gs);
                float& l = lo[size_t(r * G + g)];
                float& h = hi[size_t(r * G + g)];
                group_range(wr + j0, j1 - j0, s.o->mode, c, &l, &h);
                for (int64_t j = j0; j < j1; ++j) clamped[size_t(r * in + j)] = std::clamp(wr[j], l, h);
            }
        }
        core::Result<Int4Matrix> q = quantize_int4(clamped, rows, in, gs, s.o->mode);
        if (!q.is_ok()) return false;
        const std::vector<float> deq = dequantize(*q);
        std::vector<float> d(size_t(rows * in));  // [rows, in] W - W'
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < in; ++j) d[size_t(r * in + j)] = s.w[(r0 + r) * in + j] - deq[size_t(r * in + j)];
        }
        std::fill(err.begin(), err.end(), 0.0);
        for (int64_t t = 0; t < s.m; ++t) {
            const float* xt = s.xs->data() + t * in;
            for (int64_t r = 0; r < rows; ++r) {
                const float* dr = d.data() + r * in;
                for (int64_t g = 0; g < G; ++g) {
                    const int64_t j0 = g * gs, j1 = std::min(in, j0 + gs);
                    float dot = 0;
                    for (int64_t j = j0; j < j1; ++j) dot += xt[j] * dr[j];
                    err[size_t(r * G + g)] += double(dot) * double(dot);
                }
            }
        }
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t g = 0; g < G; ++g) {
                const size_t local = size_t(r * G + g), global = size_t((r0 + r) * G + g);
                if (i == 0) base_err[global] = err[local];
                if (i == 0 || err[local] < best_err[global]) {
                    best_err[global] = err[local];
                    res.lo[global] = lo[local];
                    res.hi[global] = hi[local];
                    res.ratio[global] = c;
                }
            }
        }
    }
    return true;
}

}  // namespace

core::Result<AwqClipResult> awq_clip_search(std::span<const float> w, int64_t rows, int64_t in,
                                            std::span<const float> x, int64_t n, const AwqClipOptions& options,
                                            core::ThreadPool* pool) {
    KILN_RETURN_IF_ERROR(check_options(options));
    if (rows < 1 || in < 1 || n < 1) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq_clip: rows = " << rows << ", in = " << in << ", n = " << n << " (expected >= 1)";
    }
    KILN_RETURN_IF_ERROR(check_matrix(w, rows, in, "awq_clip weight", /*require_finite=*/true));
    KILN_RETURN_IF_ERROR(check_matrix(x, n, in, "awq_clip input x", /*require_finite=*/true));
    AwqClipResult res;
    res.rows = rows;
    res.cols = in;
    res.group_size = options.group_size;
    res.groups_per_row = (in + options.group_size - 1) / options.group_size;
    res.num_samples = std::min(n, options.max_samples);
    std::vector<float> xs(size_t(res.num_samples * in));
    for (int64_t i = 0; i < res.num_samples; ++i) {
        std::copy_n(x.begin() + (i * n / res.num_samples) * in, in, xs.begin() + i * in);
    }
    const size_t cells = size_t(rows * res.groups_per_row);
    res.lo.assign(cells, 0.0f);
    res.hi.assign(cells, 0.0f);
    res.ratio.assign(cells, 1.0f);
    std::vector<double> best_err(cells, 0.0), base_err(cells, 0.0);
    // i < max_shrink * grid, and always i = 0 (no clipping).
    const int num_ratios = std::max(1, int(std::ceil(options.max_shrink * double(options.grid) - 1e-9)));
    const Search s{w.data(), in, res.groups_per_row, &xs, res.num_samples, &options, num_ratios};
    std::vector<char> ok(size_t(rows), 1);
    auto run = [&](int64_t begin, int64_t end) {
        for (int64_t r0 = begin; r0 < end; r0 += kRowBlock) {
            const int64_t r1 = std::min(end, r0 + kRowBlock);
            if (!search_block(s, r0, r1, res, best_err, base_err)) std::fill(ok.begin() + r0, ok.begin() + r1, 0);
        }
    };
    if (pool != nullptr) {
        pool->parallel_for(rows, run, kRowBlock);
    } else {
        run(0, rows);
    }
    if (std::find(ok.begin(), ok.end(), 0) != ok.end()) {
        return core::error(StatusCode::kInvalidArgument) << "awq_clip: the weights cannot be quantized";
    }
    double base = 0, best = 0;
    for (size_t i = 0; i < cells; ++i) {
        base += base_err[i];
        best += best_err[i];
    }
    const double denom = double(res.num_samples) * double(rows);
    res.base_error = base / denom;
    res.clip_error = best / denom;
    if (!std::isfinite(res.base_error)) {
        return core::error(StatusCode::kInvalidArgument)
               << "awq_clip: the output error is not finite (inputs too large)";
    }
    return res;
}

core::Status apply_awq_clip(std::span<float> w, int64_t rows, int64_t cols, const AwqClipResult& clip) {
    const int64_t G = clip.groups_per_row;
    if (rows != clip.rows || cols != clip.cols || int64_t(w.size()) != rows * cols || clip.group_size < 1 ||
        G != (cols + clip.group_size - 1) / clip.group_size || clip.lo.size() != size_t(rows * G) ||
        clip.hi.size() != size_t(rows * G)) {
        return core::error(StatusCode::kInvalidArgument)
               << "apply_awq_clip: weight [" << rows << ", " << cols << "] (" << w.size() << " values) vs clip ["
               << clip.rows << ", " << clip.cols << "] group " << clip.group_size;
    }
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < G; ++g) {
            const float lo = clip.lo[size_t(r * G + g)], hi = clip.hi[size_t(r * G + g)];
            if (!(lo <= hi)) {
                return core::error(StatusCode::kInvalidArgument)
                       << "apply_awq_clip: range [" << lo << ", " << hi << "] at row " << r << " group " << g;
            }
            const int64_t j1 = std::min(cols, (g + 1) * clip.group_size);
            for (int64_t j = g * clip.group_size; j < j1; ++j) {
                float& v = w[size_t(r * cols + j)];
                v = std::clamp(v, lo, hi);
            }
        }
    }
    return core::Status::ok();
}

}  // namespace kiln::quant
