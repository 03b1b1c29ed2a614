// Repacking of kiln's integer quantized matrices (int_quant.h) into the GGML block layouts that
// kiln's fast CPU kernels run (ggml-common.h): INT8 per-row -> Q8_0, INT4 symmetric -> Q4_0,
// INT4 asymmetric -> Q4_1, for any group size that is a multiple of 32 (a group's scale is repeated
// in each of its 32-element blocks).
// Exact up to the scales: GGML blocks hold fp16 scales, so each dequantized weight differs from
// quant::dequantize by the fp16 rounding of its scale (relative 2^-11) and, for Q4_1, of the
// offset -zero * scale. Precondition: cols % 32 == 0 (GGML rows are whole blocks); otherwise
// kInvalidArgument — callers keep such matrices dequantized to f32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "quant/int_quant.h"

namespace kiln::quant {

inline constexpr int64_t kGgmlBlock = 32;

// Q8_0 blocks {fp16 d; int8 q[32]}: w = d * q.
core::Result<std::vector<uint8_t>> to_q8_0(const Int8Matrix& m);
// The same from int8 values q [rows, cols] with one scale per group of `group_size` columns
// (scales [rows, cols / group_size]; group_size a multiple of 32).
core::Result<std::vector<uint8_t>> to_q8_0(std::span<const int8_t> q, int64_t rows, int64_t cols,
                                           std::span<const float> scales, int64_t group_size);
// Q4_0 blocks {fp16 d; uint8 qs[16]} (element j in the low nibble of qs[j], j + 16 in the high):
// w = d * (nibble - 8). Needs a kSymmetric matrix.
// Q4_1 blocks {fp16 d; fp16 m; uint8 qs[16]}: w = d * nibble + m. Needs a kAsymmetric matrix.
core::Result<std::vector<uint8_t>> to_q4_0(const Int4Matrix& m);
core::Result<std::vector<uint8_t>> to_q4_1(const Int4Matrix& m);

}  // namespace kiln::quant
