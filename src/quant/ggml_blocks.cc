// INT8/INT4 matrices -> GGML Q8_0 / Q4_0 / Q4_1 blocks (see ggml_blocks.h).
#include "quant/ggml_blocks.h"

#include <cstring>

#include "core/numeric.h"
#include "quant/common.h"

namespace kiln::quant {
namespace {

using core::StatusCode;

core::Status check_cols(int64_t cols, int64_t group_size) {
    if (cols % kGgmlBlock != 0)
        return core::error(StatusCode::kInvalidArgument)
               << "rows of " << cols << " elements are not whole 32-element GGML blocks";
    if (group_size % kGgmlBlock != 0)
        return core::error(StatusCode::kInvalidArgument) << "group size " << group_size << " is not a multiple of 32";
    return core::Status::ok();
}

void put_f16(uint8_t* p, float v) {
    const uint16_t h = core::f32_to_fp16(v);
    std::memcpy(p, &h, 2);
}

// Writes one Q4 block's 16 nibble bytes from 32 unsigned codes (GGML order: j low, j + 16 high).
void put_nibbles(uint8_t* qs, const uint8_t* codes) {
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t((codes[j] & 0x0F) | ((codes[j + 16] & 0x0F) << 4));
}

core::Result<std::vector<uint8_t>> to_q4(const Int4Matrix& m, bool with_min) {
    KILN_RETURN_IF_ERROR(check_cols(m.cols, m.group_size));
    const int64_t blocks = m.cols / kGgmlBlock, groups = m.groups_per_row();
    const size_t block_bytes = with_min ? 20 : 18;
    std::vector<uint8_t> out(size_t(m.rows * blocks) * block_bytes);
    uint8_t codes[kGgmlBlock];
    for (int64_t r = 0; r < m.rows; ++r) {
        std::span<const uint8_t> row(m.data.data() + r * m.row_bytes, size_t(m.row_bytes));
        for (int64_t b = 0; b < blocks; ++b) {
            const int64_t g = b * kGgmlBlock / m.group_size;
            const float scale = m.scales[size_t(r * groups + g)];
            uint8_t* blk = out.data() + size_t(r * blocks + b) * block_bytes;
            for (int64_t j = 0; j < kGgmlBlock; ++j) {
                const uint8_t c = get_nibble(row, b * kGgmlBlock + j);
                // Symmetric codes are two's complement -7..7: +8 gives Q4_0's unsigned nibble.
                codes[j] = with_min ? c : uint8_t((c ^ 0x8) & 0x0F);
            }
            put_f16(blk, scale);
            if (with_min) put_f16(blk + 2, -float(m.zeros[size_t(r * groups + g)]) * scale);
            put_nibbles(blk + (with_min ? 4 : 2), codes);
        }
    }
    return out;
}

}  // namespace

core::Result<std::vector<uint8_t>> to_q8_0(std::span<const int8_t> q, int64_t rows, int64_t cols,
                                           std::span<const float> scales, int64_t group_size) {
    KILN_RETURN_IF_ERROR(check_cols(cols, group_size));
    const int64_t blocks = cols / kGgmlBlock, groups = cols / group_size;
    if (q.size() != size_t(rows * cols) || scales.size() != size_t(rows * groups))
        return core::error(StatusCode::kInvalidArgument) << "int8 values or scales of the wrong size";
    std::vector<uint8_t> out(size_t(rows * blocks) * 34);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < blocks; ++b) {
            uint8_t* blk = out.data() + size_t(r * blocks + b) * 34;
            put_f16(blk, scales[size_t(r * groups + b * kGgmlBlock / group_size)]);
            std::memcpy(blk + 2, q.data() + r * cols + b * kGgmlBlock, kGgmlBlock);
        }
    return out;
}

core::Result<std::vector<uint8_t>> to_q8_0(const Int8Matrix& m) {
    return to_q8_0(m.data, m.rows, m.cols, m.scales, m.cols);  // one group per row
}

core::Result<std::vector<uint8_t>> to_q4_0(const Int4Matrix& m) {
    if (m.mode != Int4Mode::kSymmetric)
        return core::error(StatusCode::kInvalidArgument) << "Q4_0 holds symmetric INT4 (no zero points)";
    return to_q4(m, false);
}

core::Result<std::vector<uint8_t>> to_q4_1(const Int4Matrix& m) {
    if (m.mode != Int4Mode::kAsymmetric)
        return core::error(StatusCode::kInvalidArgument) << "Q4_1 holds asymmetric INT4 (with zero points)";
    return to_q4(m, true);
}

}  // namespace kiln::quant
