// INT8 / INT4 RTN quantize/dequantize (see int_quant.h for the rules and the layout).
// std::nearbyint rounds half to even under the default rounding mode, which nothing here changes.
#include "quant/int_quant.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "quant/common.h"

namespace kiln::quant {
namespace {

float round_clamp(float v, float lo, float hi) {
    return std::clamp(std::nearbyint(v), lo, hi);
}

}  // namespace

Int4Matrix empty_int4(int64_t rows, int64_t cols, int64_t group_size, Int4Mode mode) {
    Int4Matrix m;
    m.mode = mode;
    m.rows = rows;
    m.cols = cols;
    m.group_size = group_size;
    m.row_bytes = ceil_div(cols, 2);
    m.data.assign(size_t(rows * m.row_bytes), 0);
    m.scales.resize(size_t(rows * m.groups_per_row()));
    if (mode == Int4Mode::kAsymmetric) m.zeros.resize(size_t(rows * m.groups_per_row()));
    return m;
}

Int4Group int4_group_params(std::span<const float> g, Int4Mode mode) {
    if (mode == Int4Mode::kSymmetric) {
        float amax = 0;
        for (float v : g) amax = std::max(amax, std::fabs(v));
        const float scale = amax / 7.0f;
        return {scale == 0 ? 1.0f : scale, 0};
    }
    float lo = 0, hi = 0;
    for (float v : g) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    const float scale = (hi - lo) / 15.0f;
    if (scale == 0) return {1.0f, 0};
    return {scale, uint8_t(round_clamp(-lo / scale, 0, 15))};
}

uint8_t int4_code(float v, const Int4Group& p, Int4Mode mode) {
    const float x = v / p.scale;
    const int q = mode == Int4Mode::kSymmetric ? int(round_clamp(x, -7, 7))
                                               : int(std::clamp(std::nearbyint(x) + p.zero, 0.0f, 15.0f));
    return uint8_t(q & 0x0F);
}

float int4_value(uint8_t code, const Int4Group& p, Int4Mode mode) {
    const int q = mode == Int4Mode::kSymmetric ? (code >= 8 ? code - 16 : code) : code - int(p.zero);
    return float(q) * p.scale;
}

core::Result<Int8Matrix> quantize_int8_rows(std::span<const float> x, int64_t rows, int64_t cols) {
    KILN_RETURN_IF_ERROR(check_matrix(x, rows, cols, "quantize_int8_rows", /*require_finite=*/true));
    Int8Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.data.resize(x.size());
    m.scales.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
        const std::span<const float> row = x.subspan(size_t(r * cols), size_t(cols));
        float amax = 0;
        for (float v : row) amax = std::max(amax, std::fabs(v));
        const float scale = amax / 127.0f == 0 ? 1.0f : amax / 127.0f;
        m.scales[size_t(r)] = scale;
        for (int64_t c = 0; c < cols; ++c) {
            m.data[size_t(r * cols + c)] = int8_t(round_clamp(row[size_t(c)] / scale, -127, 127));
        }
    }
    return m;
}

std::vector<float> dequantize(const Int8Matrix& m) {
    KILN_CHECK(int64_t(m.data.size()) == m.rows * m.cols && int64_t(m.scales.size()) == m.rows)
        << "Int8Matrix: inconsistent sizes";
    std::vector<float> y(m.data.size());
    for (int64_t r = 0; r < m.rows; ++r) {
        for (int64_t c = 0; c < m.cols; ++c) {
            const size_t i = size_t(r * m.cols + c);
            y[i] = float(m.data[i]) * m.scales[size_t(r)];
        }
    }
    return y;
}

core::Result<Int4Matrix> quantize_int4(std::span<const float> x, int64_t rows, int64_t cols, int64_t group_size,
                                       Int4Mode mode) {
    if (group_size != 32 && group_size != 64 && group_size != 128) {
        return core::error(core::StatusCode::kInvalidArgument)
               << "quantize_int4: group size " << group_size << " (expected 32, 64 or 128)";
    }
    KILN_RETURN_IF_ERROR(check_matrix(x, rows, cols, "quantize_int4", /*require_finite=*/true));
    Int4Matrix m = empty_int4(rows, cols, group_size, mode);
    const int64_t num_groups = m.groups_per_row();

    for (int64_t r = 0; r < rows; ++r) {
        const std::span<uint8_t> out(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t g = 0; g < num_groups; ++g) {
            const int64_t begin = g * group_size;
            const int64_t end = std::min(cols, begin + group_size);
            const std::span<const float> group = x.subspan(size_t(r * cols + begin), size_t(end - begin));
            const Int4Group p = int4_group_params(group, mode);
            m.scales[size_t(r * num_groups + g)] = p.scale;
            if (mode == Int4Mode::kAsymmetric) m.zeros[size_t(r * num_groups + g)] = p.zero;
            for (int64_t c = begin; c < end; ++c) set_nibble(out, c, int4_code(group[size_t(c - begin)], p, mode));
        }
    }
    return m;
}

std::vector<float> dequantize(const Int4Matrix& m) {
    const int64_t num_groups = m.groups_per_row();
    KILN_CHECK(int64_t(m.data.size()) == m.rows * m.row_bytes && int64_t(m.scales.size()) == m.rows * num_groups &&
               (m.mode == Int4Mode::kSymmetric || int64_t(m.zeros.size()) == m.rows * num_groups))
        << "Int4Matrix: inconsistent sizes";
    std::vector<float> y(size_t(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
        const std::span<const uint8_t> in(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t c = 0; c < m.cols; ++c) {
            const size_t gi = size_t(r * num_groups + c / m.group_size);
            const Int4Group p{m.scales[gi], m.mode == Int4Mode::kAsymmetric ? m.zeros[gi] : uint8_t(0)};
            y[size_t(r * m.cols + c)] = int4_value(get_nibble(in, c), p, m.mode);
        }
    }
    return y;
}

}  // namespace kiln::quant
