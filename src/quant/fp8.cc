// FP8 E4M3 scaled quantize/dequantize (see fp8.h for the rules).
#include "quant/fp8.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "quant/common.h"
#include "quant/minifloat.h"

namespace kiln::quant {
namespace {

constexpr float kE4M3Max = 448.0f;

int64_t num_scales(Fp8Granularity g, int64_t rows, int64_t cols) {
    switch (g) {
        case Fp8Granularity::kPerTensor:
            return 1;
        case Fp8Granularity::kPerChannel:
            return rows;
        case Fp8Granularity::kBlock128:
            return ceil_div(rows, kFp8BlockSize) * ceil_div(cols, kFp8BlockSize);
    }
    return 0;
}

}  // namespace

int64_t Fp8Matrix::scale_index(int64_t r, int64_t c) const {
    switch (granularity) {
        case Fp8Granularity::kPerTensor:
            return 0;
        case Fp8Granularity::kPerChannel:
            return r;
        case Fp8Granularity::kBlock128:
            return (r / kFp8BlockSize) * ceil_div(cols, kFp8BlockSize) + c / kFp8BlockSize;
    }
    return 0;
}

core::Result<Fp8Matrix> quantize_fp8(std::span<const float> x, int64_t rows, int64_t cols, Fp8Granularity granularity) {
    KILN_RETURN_IF_ERROR(check_matrix(x, rows, cols, "quantize_fp8", /*require_finite=*/true));
    Fp8Matrix m;
    m.granularity = granularity;
    m.rows = rows;
    m.cols = cols;
    m.data.assign(x.size(), 0);
    // Two passes over the groups: amax per group, then the scales, then the elements.
    std::vector<float> amax(size_t(num_scales(granularity, rows, cols)), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            float& a = amax[size_t(m.scale_index(r, c))];
            a = std::max(a, std::fabs(x[size_t(r * cols + c)]));
        }
    }
    m.scales.resize(amax.size());
    for (size_t i = 0; i < amax.size(); ++i) {
        const float scale = amax[i] / kE4M3Max;
        m.scales[i] = scale == 0 ? 1.0f : scale;
    }
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const size_t i = size_t(r * cols + c);
            m.data[i] = encode(kE4M3, x[i] / m.scales[size_t(m.scale_index(r, c))], Saturation::kSaturate);
        }
    }
    return m;
}

std::vector<float> dequantize(const Fp8Matrix& m) {
    KILN_CHECK(int64_t(m.data.size()) == m.rows * m.cols &&
               int64_t(m.scales.size()) == num_scales(m.granularity, m.rows, m.cols))
        << "Fp8Matrix: inconsistent sizes";
    std::vector<float> y(m.data.size());
    for (int64_t r = 0; r < m.rows; ++r) {
        for (int64_t c = 0; c < m.cols; ++c) {
            const size_t i = size_t(r * m.cols + c);
            y[i] = decode(kE4M3, m.data[i]) * m.scales[size_t(m.scale_index(r, c))];
        }
    }
    return y;
}

}  // namespace kiln::quant
