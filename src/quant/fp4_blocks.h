// Repacking of kiln's FP4 matrices (mx.h MXFP4, nvfp4.h NVFP4: codes two per byte with element 2i in
// the low nibble, scales stored apart) into the block layouts the FP4 CPU kernels run (core/dtype.h):
//  - MXFP4 -> kMxfp4 (ggml block_mxfp4 {E8M0 e; qs[16]}, element j low nibble of qs[j], j + 16 high).
//    Exact: the E2M1 codes and E8M0 scales are copied, so kernels::ref::dequantize_row gives
//    quant::dequantize's values bit for bit (a NaN scale 0xFF stays NaN).
//  - NVFP4 -> kNvfp4 (kiln's {fp16 d; qs[8]}, element j low nibble of qs[j], j + 8 high) with
//    d = fp16(decode_e4m3(block_scale) * tensor_scale): the one deviation from quant::dequantize is
//    that fp16 rounding of the block scale, |d16 - d| <= 2^-11 |d| (+ 2^-25 where d is below fp16's
//    normal range, 2^-14), times |e2m1| <= 6 per element. A scale that is not finite in fp16 (NaN
//    E4M3 code, or a product above 65504) is kInvalidArgument; callers keep the matrix as f32.
// Precondition: cols a multiple of the block (32 MXFP4, 16 NVFP4), else kInvalidArgument.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"

namespace kiln::quant {

// [rows, cols / 32] kMxfp4 blocks, row-major. m.element must be kE2M1.
core::Result<std::vector<uint8_t>> to_mxfp4_blocks(const MxMatrix& m);
// [rows, cols / 16] kNvfp4 blocks, row-major.
core::Result<std::vector<uint8_t>> to_nvfp4_blocks(const Nvfp4Matrix& m);

}  // namespace kiln::quant
