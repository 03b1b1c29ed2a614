// Repacking of kiln's FP8 matrices (fp8.h per-tensor / per-channel / 128x128-block E4M3 with fp32
// scales; mx.h MXFP8 with E4M3 elements) into the 32-element blocks the FP8 CPU kernels run
// (core/dtype.h, kernels/cpu/simd_fp8_kernels.h):
//  - Fp8Matrix -> kE4m3B32 {fp32 d; uint8 qs[32]}: d is the scale of the group holding the block (a
//    32-element block never straddles a scale group: 128 is a multiple of 32).
//  - MxMatrix (E4M3) -> kMxfp8 {uint8 e; uint8 qs[32]}: codes and E8M0 scales copied.
// Both exact: kernels::ref::dequantize_row gives quant::dequantize's values bit for bit.
// Preconditions, each kInvalidArgument: cols a multiple of 32; consistent sizes; no E4M3 NaN code
// (0x7F, 0xFF) in the data, since the SIMD decode maps them to +-480 (the caller reports which
// tensor); MXFP8 with a NaN scale (E8M0 0xFF) or an element format other than E4M3.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "quant/fp8.h"
#include "quant/mx.h"

namespace kiln::quant {

// Index of the first E4M3 NaN code (0x7F or 0xFF) in codes, or -1.
int64_t find_e4m3_nan(std::span<const uint8_t> codes);

// [rows, cols / 32] kE4m3B32 blocks, row-major.
core::Result<std::vector<uint8_t>> to_e4m3_b32_blocks(const Fp8Matrix& m);
// [rows, cols / 32] kMxfp8 blocks, row-major. m.element must be kE4M3.
core::Result<std::vector<uint8_t>> to_mxfp8_blocks(const MxMatrix& m);

}  // namespace kiln::quant
