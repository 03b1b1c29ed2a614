// OCP Microscaling (MX) v1.0 block formats, scalar reference: MXFP8 (E4M3 or E5M2 elements) and
// MXFP4 (E2M1 elements), 32 elements per block along each row, one E8M0 shared scale per block.
//
// Conversion (MX v1.0 section 6.3, as in the spec's reference code microsoft/microxcaling):
//   shared_exp = floor(log2(amax(block))) - emax_elem   (emax_elem: 8 E4M3, 15 E5M2, 2 E2M1)
//   X = 2^shared_exp, stored as E8M0 code shared_exp + 127
//   P_i = encode(V_i / X), round to nearest even, saturating to +-max element (section 6.3 clamps)
// Edge rules:
// - shared_exp below -127 (tiny blocks, and all-zero blocks) is clamped to -127 (code 0x00); an
//   all-zero block is therefore scale 0x00 with zero elements.
// - A block holding a NaN or +-inf gets the NaN scale 0xFF (in MX a NaN X makes every value of the
//   block NaN); its element codes are encode(NaN) (E4M3 0x7F, E2M1 0x0). A finite float can
//   never push shared_exp above 127, so 0xFF means exactly "the block had a non-finite input".
// Layout of MxMatrix:
// - data [rows, row_bytes]: E4M3/E5M2 one code per byte (row_bytes = cols); E2M1 two per byte
//   (row_bytes = ceil(cols/2), element 2i in the low nibble, see common.h).
// - scales [rows, ceil(cols/32)]: E8M0 codes, stored apart from the elements.
// - Padding: when cols % 32 != 0 the last block of each row is short; it is quantized as if padded
//   with zeros (zeros never change amax), and the pad is not stored.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "quant/minifloat.h"

namespace kiln::quant {

inline constexpr int64_t kMxBlockSize = 32;

struct MxMatrix {
    MiniFloatFormat element = kE4M3;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t row_bytes = 0;
    std::vector<uint8_t> data;    // [rows, row_bytes]
    std::vector<uint8_t> scales;  // [rows, ceil(cols / 32)] E8M0

    int64_t blocks_per_row() const { return (cols + kMxBlockSize - 1) / kMxBlockSize; }
};

// The E8M0 scale code for a block with the given max |value| (NaN/inf amax -> 0xFF).
uint8_t mx_scale_code(const MiniFloatFormat& element, float amax);

// element: kE4M3 or kE5M2 (MXFP8) or kE2M1 (MXFP4); others are kUnsupported. NaN/inf inputs are
// not errors (they become NaN blocks, see above); a size mismatch is kInvalidArgument.
core::Result<MxMatrix> quantize_mx(const MiniFloatFormat& element, std::span<const float> x, int64_t rows,
                                   int64_t cols);
inline core::Result<MxMatrix> quantize_mxfp8(std::span<const float> x, int64_t rows, int64_t cols) {
    return quantize_mx(kE4M3, x, rows, cols);
}
inline core::Result<MxMatrix> quantize_mxfp4(std::span<const float> x, int64_t rows, int64_t cols) {
    return quantize_mx(kE2M1, x, rows, cols);
}

// [rows, cols] floats: decode(P_i) * X; every value of a NaN-scaled block is NaN.
std::vector<float> dequantize(const MxMatrix& m);

}  // namespace kiln::quant
