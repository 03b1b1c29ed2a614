// MX block quantize/dequantize (see mx.h for the rules and the layout).
#include "quant/mx.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "quant/common.h"

namespace kiln::quant {
namespace {

constexpr int kE8M0Bias = 127;
constexpr uint8_t kE8M0Nan = 0xFF;

bool element_supported(const MiniFloatFormat& element) {
    return (element.bits() == 8 || element.bits() == 4) && element.has_sign;
}

}  // namespace

uint8_t mx_scale_code(const MiniFloatFormat& element, float amax) {
    if (!std::isfinite(amax)) return kE8M0Nan;
    if (amax == 0) return 0;  // log2(0) = -inf, clamped to -127 like any tiny block
    const int shared_exp = std::ilogb(amax) - emax(element);
    if (shared_exp > kE8M0Bias) return kE8M0Nan;  // unreachable for finite floats (ilogb <= 127)
    return uint8_t(std::max(shared_exp, -kE8M0Bias) + kE8M0Bias);
}

core::Result<MxMatrix> quantize_mx(const MiniFloatFormat& element, std::span<const float> x, int64_t rows,
                                   int64_t cols) {
    if (!element_supported(element)) {
        return core::error(core::StatusCode::kUnsupported) << "quantize_mx: element format " << element.name
                                                           << " (only 8-bit and 4-bit elements are packed so far)";
    }
    KILN_RETURN_IF_ERROR(check_matrix(x, rows, cols, "quantize_mx", /*require_finite=*/false));
    MxMatrix m;
    m.element = element;
    m.rows = rows;
    m.cols = cols;
    const bool packed4 = element.bits() == 4;
    m.row_bytes = packed4 ? ceil_div(cols, 2) : cols;
    m.data.assign(size_t(rows * m.row_bytes), 0);
    const int64_t num_blocks = m.blocks_per_row();
    m.scales.assign(size_t(rows * num_blocks), 0);

    for (int64_t r = 0; r < rows; ++r) {
        const std::span<const float> row = x.subspan(size_t(r * cols), size_t(cols));
        const std::span<uint8_t> out(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t b = 0; b < num_blocks; ++b) {
            const int64_t begin = b * kMxBlockSize;
            const int64_t end = std::min(cols, begin + kMxBlockSize);
            float amax = 0;
            for (int64_t c = begin; c < end; ++c) {
                const float a = std::fabs(row[c]);
                amax = std::isnan(a) ? a : std::max(amax, a);  // NaN sticks
                if (std::isnan(amax)) break;
            }
            const uint8_t scale = mx_scale_code(element, amax);
            m.scales[size_t(r * num_blocks + b)] = scale;
            const int shared_exp = int(scale) - kE8M0Bias;
            for (int64_t c = begin; c < end; ++c) {
                // V_i / X is exact (power-of-two scaling); results below float's normal range are far
                // below the element's smallest subnormal, so they round to zero either way.
                const float scaled =
                    scale == kE8M0Nan ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(row[c], -shared_exp);
                const uint8_t code = encode(element, scaled, Saturation::kSaturate);
                if (packed4) {
                    set_nibble(out, c, code);
                } else {
                    out[size_t(c)] = code;
                }
            }
        }
    }
    return m;
}

std::vector<float> dequantize(const MxMatrix& m) {
    const int64_t num_blocks = m.blocks_per_row();
    KILN_CHECK(int64_t(m.data.size()) == m.rows * m.row_bytes && int64_t(m.scales.size()) == m.rows * num_blocks)
        << "MxMatrix: inconsistent sizes";
    const bool packed4 = m.element.bits() == 4;
    std::vector<float> y(size_t(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
        const std::span<const uint8_t> in(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t c = 0; c < m.cols; ++c) {
            const uint8_t scale = m.scales[size_t(r * num_blocks + c / kMxBlockSize)];
            const uint8_t code = packed4 ? get_nibble(in, c) : in[size_t(c)];
            y[size_t(r * m.cols + c)] = scale == kE8M0Nan ? std::numeric_limits<float>::quiet_NaN()
                                                          : std::ldexp(decode(m.element, code), int(scale) - kE8M0Bias);
        }
    }
    return y;
}

}  // namespace kiln::quant
