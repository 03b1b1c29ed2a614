// NVFP4 quantize/dequantize (see nvfp4.h for the recipe it follows and the layout).
#include "quant/nvfp4.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "quant/common.h"
#include "quant/minifloat.h"

namespace kiln::quant {
namespace {

constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;

}  // namespace

core::Result<Nvfp4Matrix> quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols) {
    KILN_RETURN_IF_ERROR(check_matrix(x, rows, cols, "quantize_nvfp4", /*require_finite=*/true));
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    float tensor_scale = amax / (kE2M1Max * kE4M3Max);
    if (tensor_scale == 0) tensor_scale = 1.0f;
    return quantize_nvfp4(x, rows, cols, tensor_scale);
}

core::Result<Nvfp4Matrix> quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale) {
    KILN_RETURN_IF_ERROR(check_matrix(x, rows, cols, "quantize_nvfp4", /*require_finite=*/true));
    if (!(tensor_scale > 0) || !std::isfinite(tensor_scale)) {
        return core::error(core::StatusCode::kInvalidArgument) << "quantize_nvfp4: tensor scale " << tensor_scale;
    }
    Nvfp4Matrix m;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = ceil_div(cols, 2);
    m.tensor_scale = tensor_scale;
    m.data.assign(size_t(rows * m.row_bytes), 0);
    const int64_t num_blocks = m.blocks_per_row();
    m.block_scales.assign(size_t(rows * num_blocks), 0);

    for (int64_t r = 0; r < rows; ++r) {
        const std::span<const float> row = x.subspan(size_t(r * cols), size_t(cols));
        const std::span<uint8_t> out(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t b = 0; b < num_blocks; ++b) {
            const int64_t begin = b * kNvfp4BlockSize;
            const int64_t end = std::min(cols, begin + kNvfp4BlockSize);
            float amax = 0;
            for (int64_t c = begin; c < end; ++c) amax = std::max(amax, std::fabs(row[c]));
            float block_scale = amax / (kE2M1Max * tensor_scale);
            if (block_scale == 0) block_scale = 1.0f;
            const uint8_t scale_code = encode(kE4M3, block_scale, Saturation::kSaturate);
            m.block_scales[size_t(r * num_blocks + b)] = scale_code;
            const float divisor = decode(kE4M3, scale_code) * tensor_scale;
            if (divisor == 0) continue;  // elements stay code 0 (+0)
            for (int64_t c = begin; c < end; ++c) {
                set_nibble(out, c, encode(kE2M1, row[c] / divisor, Saturation::kSaturate));
            }
        }
    }
    return m;
}

std::vector<float> dequantize(const Nvfp4Matrix& m) {
    const int64_t num_blocks = m.blocks_per_row();
    KILN_CHECK(int64_t(m.data.size()) == m.rows * m.row_bytes && int64_t(m.block_scales.size()) == m.rows * num_blocks)
        << "Nvfp4Matrix: inconsistent sizes";
    std::vector<float> y(size_t(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
        const std::span<const uint8_t> in(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t c = 0; c < m.cols; ++c) {
            const uint8_t scale_code = m.block_scales[size_t(r * num_blocks + c / kNvfp4BlockSize)];
            const float scale = decode(kE4M3, scale_code) * m.tensor_scale;
            y[size_t(r * m.cols + c)] = decode(kE2M1, get_nibble(in, c)) * scale;
        }
    }
    return y;
}

}  // namespace kiln::quant
