// SmoothQuant scales (see smoothquant.h).
#include "quant/smoothquant.h"

#include <algorithm>
#include <cmath>

namespace kiln::quant {

std::vector<float> channel_abs_max(std::span<const float> x, int64_t n, int64_t in) {
    std::vector<float> m(size_t(in), 0.0f);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < in; ++j) {
            const float v = std::fabs(x[size_t(i * in + j)]);
            if (v > m[size_t(j)]) m[size_t(j)] = v;  // NaN compares false: ignored
        }
    return m;
}

core::Result<std::vector<float>> smoothquant_scales(std::span<const float> act_max,
                                                    std::span<const std::span<const float>> weights, int64_t in,
                                                    double alpha) {
    if (!(alpha >= 0.0 && alpha <= 1.0))
        return core::error(core::StatusCode::kInvalidArgument) << "SmoothQuant alpha must be in [0, 1], got " << alpha;
    if (in <= 0 || int64_t(act_max.size()) != in)
        return core::error(core::StatusCode::kInvalidArgument) << "SmoothQuant: act_max has " << act_max.size()
                                                               << " channels, the weights " << in;
    std::vector<float> w_max(size_t(in), 0.0f);
    for (std::span<const float> w : weights) {
        if (w.size() % size_t(in) != 0)
            return core::error(core::StatusCode::kInvalidArgument) << "SmoothQuant: a weight is not [rows, " << in << "]";
        for (size_t i = 0; i < w.size(); ++i) {
            const float v = std::fabs(w[i]);
            if (v > w_max[i % size_t(in)]) w_max[i % size_t(in)] = v;
        }
    }
    std::vector<float> s(size_t(in), 1.0f);
    for (int64_t j = 0; j < in; ++j) {
        const double a = act_max[size_t(j)], w = w_max[size_t(j)];
        if (!(a > 0 && w > 0 && std::isfinite(a) && std::isfinite(w))) continue;
        const double v = std::pow(a, alpha) / std::pow(w, 1.0 - alpha);
        s[size_t(j)] = float(std::max(v, 1e-5));
    }
    return s;
}

}  // namespace kiln::quant
