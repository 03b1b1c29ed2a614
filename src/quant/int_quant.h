// Integer weight/activation quantization with fp32 scales, scalar reference (round-to-nearest, the
// "RTN" baseline that AWQ/GPTQ improve on). x is [rows, cols] row-major; for a Linear weight rows
// are output channels and groups run along the input dimension (cols).
//
// INT8 symmetric, one scale per row (per output channel for weights; per token for activations,
// computed dynamically at run time from the token's own amax):
//   scale = amax(row) / 127; q = clamp(round_half_even(v / scale), -127, 127); v' = q * scale.
// INT4 groupwise, group_size in {32, 64, 128} along each row:
// - kSymmetric: scale = amax(group) / 7; q = clamp(round_half_even(v / scale), -7, 7), stored as a
//   4-bit two's complement nibble (code 8 = -8 is never produced); v' = q * scale. The divisor 7
//   (not 8) keeps the grid symmetric, so +amax and -amax are both exact.
// - kAsymmetric: lo = min(min(group), 0), hi = max(max(group), 0) (the range always holds 0, so 0
//   is exact and the zero point is in range: GPTQ's convention); scale = (hi - lo) / 15;
//   zero = clamp(round_half_even(-lo / scale), 0, 15); q = clamp(round_half_even(v / scale) + zero,
//   0, 15) as an unsigned nibble; v' = (q - zero) * scale.
// Edge rules: a group (row) whose scale computes to 0 (all zeros) gets scale 1 and zero 0, so scales
// are never 0. A row whose length is not a multiple of group_size ends with a short group: its scale
// comes from its real elements only (as if padded with zeros, which change neither amax nor the
// zero-including range) and the pad is not stored. NaN/inf inputs are kInvalidArgument.
// Layout: INT8 data [rows, cols]; INT4 data [rows, ceil(cols/2)], element 2i in the low nibble
// (common.h); scales and zeros [rows, ceil(cols/group_size)], zeros empty for kSymmetric.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace kiln::quant {

struct Int8Matrix {
    int64_t rows = 0;
    int64_t cols = 0;
    std::vector<int8_t> data;   // [rows, cols]
    std::vector<float> scales;  // [rows]
};

// Per-row symmetric INT8: per-output-channel weights and dynamic per-token activations alike.
core::Result<Int8Matrix> quantize_int8_rows(std::span<const float> x, int64_t rows, int64_t cols);
std::vector<float> dequantize(const Int8Matrix& m);

enum class Int4Mode { kSymmetric, kAsymmetric };

struct Int4Matrix {
    Int4Mode mode = Int4Mode::kSymmetric;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t group_size = 0;
    int64_t row_bytes = 0;       // ceil(cols / 2)
    std::vector<uint8_t> data;   // [rows, row_bytes]
    std::vector<float> scales;   // [rows, groups_per_row()]
    std::vector<uint8_t> zeros;  // [rows, groups_per_row()] for kAsymmetric, else empty

    int64_t groups_per_row() const { return group_size == 0 ? 0 : (cols + group_size - 1) / group_size; }
};

core::Result<Int4Matrix> quantize_int4(std::span<const float> x, int64_t rows, int64_t cols, int64_t group_size,
                                       Int4Mode mode);

// One INT4 group as quantize_int4 quantizes it, for algorithms that quantize a group at a time
// (quant/gptq.h): its scale and zero point (0 for kSymmetric), each value's stored nibble, and a
// nibble's dequantized value.
struct Int4Group {
    float scale = 1.0f;
    uint8_t zero = 0;
};
// A zero-filled matrix of that shape (data, scales, and zeros when kAsymmetric, sized).
Int4Matrix empty_int4(int64_t rows, int64_t cols, int64_t group_size, Int4Mode mode);
Int4Group int4_group_params(std::span<const float> group, Int4Mode mode);
uint8_t int4_code(float v, const Int4Group& p, Int4Mode mode);
float int4_value(uint8_t code, const Int4Group& p, Int4Mode mode);
std::vector<float> dequantize(const Int4Matrix& m);

}  // namespace kiln::quant
