// FP8 matrix -> FP8 kernel blocks (see fp8_blocks.h).
#include "quant/fp8_blocks.h"

#include <cstring>
#include <string>

namespace kiln::quant {
namespace {

constexpr int64_t kBlock = 32;

core::Status invalid(const std::string& what) {
    return core::error(core::StatusCode::kInvalidArgument) << what;
}

core::Status check_codes(std::span<const uint8_t> codes, int64_t cols, const char* fn) {
    const int64_t i = find_e4m3_nan(codes);
    if (i < 0) return core::Status::ok();
    return invalid(std::string(fn) + ": element (" + std::to_string(i / cols) + ", " + std::to_string(i % cols) +
                   ") is an E4M3 NaN code");
}

}  // namespace

int64_t find_e4m3_nan(std::span<const uint8_t> codes) {
    for (size_t i = 0; i < codes.size(); ++i)
        if ((codes[i] & 0x7f) == 0x7f) return int64_t(i);
    return -1;
}

core::Result<std::vector<uint8_t>> to_e4m3_b32_blocks(const Fp8Matrix& m) {
    constexpr int64_t kBytes = 36;
    if (m.cols % kBlock != 0) return invalid("to_e4m3_b32_blocks: cols is not a multiple of 32");
    const int64_t nb = m.cols / kBlock;
    const int64_t want_scales = m.granularity == Fp8Granularity::kPerTensor    ? 1
                                : m.granularity == Fp8Granularity::kPerChannel ? m.rows
                                                                               : ((m.rows + kFp8BlockSize - 1) / kFp8BlockSize) *
                                                                                     ((m.cols + kFp8BlockSize - 1) / kFp8BlockSize);
    if (int64_t(m.data.size()) != m.rows * m.cols || int64_t(m.scales.size()) != want_scales)
        return invalid("to_e4m3_b32_blocks: inconsistent sizes");
    KILN_RETURN_IF_ERROR(check_codes(m.data, m.cols, "to_e4m3_b32_blocks"));
    std::vector<uint8_t> out(size_t(m.rows * nb * kBytes));
    for (int64_t r = 0; r < m.rows; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* blk = &out[size_t((r * nb + b) * kBytes)];
            const float d = m.scales[size_t(m.scale_index(r, b * kBlock))];
            std::memcpy(blk, &d, 4);
            std::memcpy(blk + 4, &m.data[size_t(r * m.cols + b * kBlock)], kBlock);
        }
    }
    return out;
}

core::Result<std::vector<uint8_t>> to_mxfp8_blocks(const MxMatrix& m) {
    constexpr int64_t kBytes = 33;
    if (m.element.exp_bits != 4 || m.element.man_bits != 3) return invalid("to_mxfp8_blocks: not an E4M3 matrix");
    if (m.cols % kBlock != 0) return invalid("to_mxfp8_blocks: cols is not a multiple of 32");
    const int64_t nb = m.cols / kBlock;
    if (m.row_bytes != m.cols || int64_t(m.data.size()) != m.rows * m.cols || int64_t(m.scales.size()) != m.rows * nb)
        return invalid("to_mxfp8_blocks: inconsistent sizes");
    KILN_RETURN_IF_ERROR(check_codes(m.data, m.cols, "to_mxfp8_blocks"));
    std::vector<uint8_t> out(size_t(m.rows * nb * kBytes));
    for (int64_t r = 0; r < m.rows; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* blk = &out[size_t((r * nb + b) * kBytes)];
            blk[0] = m.scales[size_t(r * nb + b)];
            if (blk[0] == 0xFF) return invalid("to_mxfp8_blocks: a block scale is NaN (E8M0 0xFF)");
            std::memcpy(blk + 1, &m.data[size_t(r * m.cols + b * kBlock)], kBlock);
        }
    }
    return out;
}

}  // namespace kiln::quant
