// FP4 matrix -> FP4 kernel blocks (see fp4_blocks.h).
#include "quant/fp4_blocks.h"

#include <cmath>
#include <cstring>

#include "core/numeric.h"
#include "quant/common.h"
#include "quant/minifloat.h"

namespace kiln::quant {
namespace {

core::Status invalid(const char* what) {
    return core::error(core::StatusCode::kInvalidArgument) << what;
}

}  // namespace

core::Result<std::vector<uint8_t>> to_mxfp4_blocks(const MxMatrix& m) {
    constexpr int64_t kBytes = 17;
    if (m.element.bits() != 4 || m.element.exp_bits != 2) return invalid("to_mxfp4_blocks: not an E2M1 matrix");
    if (m.cols % kMxBlockSize != 0) return invalid("to_mxfp4_blocks: cols is not a multiple of 32");
    const int64_t nb = m.cols / kMxBlockSize;
    if (int64_t(m.data.size()) != m.rows * m.row_bytes || int64_t(m.scales.size()) != m.rows * nb)
        return invalid("to_mxfp4_blocks: inconsistent sizes");
    std::vector<uint8_t> out(size_t(m.rows * nb * kBytes));
    for (int64_t r = 0; r < m.rows; ++r) {
        const std::span<const uint8_t> row(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* blk = &out[size_t((r * nb + b) * kBytes)];
            blk[0] = m.scales[size_t(r * nb + b)];
            for (int64_t j = 0; j < 16; ++j) {
                const int64_t c = b * kMxBlockSize + j;
                blk[1 + j] = uint8_t(get_nibble(row, c) | get_nibble(row, c + 16) << 4);
            }
        }
    }
    return out;
}

core::Result<std::vector<uint8_t>> to_nvfp4_blocks(const Nvfp4Matrix& m) {
    constexpr int64_t kBytes = 10;
    if (m.cols % kNvfp4BlockSize != 0) return invalid("to_nvfp4_blocks: cols is not a multiple of 16");
    const int64_t nb = m.cols / kNvfp4BlockSize;
    if (int64_t(m.data.size()) != m.rows * m.row_bytes || int64_t(m.block_scales.size()) != m.rows * nb)
        return invalid("to_nvfp4_blocks: inconsistent sizes");
    std::vector<uint8_t> out(size_t(m.rows * nb * kBytes));
    for (int64_t r = 0; r < m.rows; ++r) {
        const std::span<const uint8_t> row(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* blk = &out[size_t((r * nb + b) * kBytes)];
            const float d = decode(kE4M3, m.block_scales[size_t(r * nb + b)]) * m.tensor_scale;
            const uint16_t h = core::f32_to_fp16(d);
            if (!std::isfinite(core::fp16_to_f32(h)))
                return invalid("to_nvfp4_blocks: a block scale is not finite in fp16");
            std::memcpy(blk, &h, 2);
            for (int64_t j = 0; j < 8; ++j) {
                const int64_t c = b * kNvfp4BlockSize + j;
                blk[2 + j] = uint8_t(get_nibble(row, c) | get_nibble(row, c + 8) << 4);
            }
        }
    }
    return out;
}

}  // namespace kiln::quant
