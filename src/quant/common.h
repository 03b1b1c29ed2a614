// Helpers shared by the scalar block quantizers: ceil division, 4-bit packing, input validation.
// Packing invariant (every 4-bit format here: MXFP4, NVFP4, INT4): element 2i of a row sits in the
// low nibble of byte i, element 2i+1 in the high nibble; a row of n codes takes ceil(n/2) bytes and
// the unused high nibble of an odd-length row's last byte is 0. Rows start on a byte boundary.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"

namespace kiln::quant {

inline int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

inline void set_nibble(std::span<uint8_t> row, int64_t idx, uint8_t code) {
    uint8_t& byte = row[size_t(idx / 2)];
    byte = (idx % 2 == 0) ? uint8_t((byte & 0xF0) | (code & 0x0F)) : uint8_t((byte & 0x0F) | ((code & 0x0F) << 4));
}

inline uint8_t get_nibble(std::span<const uint8_t> row, int64_t idx) {
    const uint8_t byte = row[size_t(idx / 2)];
    return (idx % 2 == 0) ? uint8_t(byte & 0x0F) : uint8_t(byte >> 4);
}

// x must hold rows * cols floats (row-major), rows and cols >= 0. With require_finite, a NaN or inf
// is an error naming its row and column (formats whose scales cannot carry NaN reject them).
core::Status check_matrix(std::span<const float> x, int64_t rows, int64_t cols, const char* what, bool require_finite);

}  // namespace kiln::quant
