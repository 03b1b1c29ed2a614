// NVFP4, scalar reference: E2M1 elements in 16-element blocks along each row, one E4M3 scale per
// block, and one fp32 scale per tensor (two-level scaling of NVIDIA Blackwell block-scaled MMA).
//
// Follows NVIDIA TensorRT Model Optimizer (modelopt/torch/quantization/qtensor/nvfp4_tensor.py,
// NVFP4QTensor), which produces the NVFP4 checkpoints that TensorRT-LLM, vLLM and SGLang load:
//   tensor_scale = amax(tensor) / (6 * 448)                 ("weight_scale_2", fp32)
//   block_scale  = e4m3(amax(block) / (6 * tensor_scale))   ("weight_scale", saturating, RNE)
//   P_i          = e2m1(V_i / (decode(block_scale) * tensor_scale)), saturating, RNE
//   dequantized  = decode(P_i) * (decode(block_scale) * tensor_scale)
// The same thing written with vLLM/FlashInfer's global_scale = 1 / tensor_scale = 448*6/amax is
// block = e4m3(amax_b / 6 * global_scale), P_i = e2m1(V_i * global_scale / block) (equal up to fp32
// rounding of the different operation order; this file evaluates ModelOpt's order, in fp32).
// Edge rules:
// - An fp32 block scale of exactly 0 (all-zero block) is replaced by 1.0 before the E4M3 cast
//   (ModelOpt does the same), so stored block scales of zero blocks are 0x38.
// - A block whose scale rounds to E4M3 zero (amax below ~2^-10 * 6 * tensor_scale) stores zero
//   elements (their dequantized value is 0 either way; dividing by 0 would make inf/NaN).
// - amax(tensor) == 0 (or so small that amax / 2688 is 0) gives tensor_scale = 1.
// - NaN/inf inputs are kInvalidArgument: neither scale level can carry them.
// Layout: data [rows, ceil(cols/2)] E2M1 nibbles, element 2i in the low nibble (common.h);
// block_scales [rows, ceil(cols/16)] E4M3 codes, row-major, unswizzled (the swizzled layout the
// tensor cores read is a kernel concern). A short last block is padded with zeros that are not stored.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace kiln::quant {

inline constexpr int64_t kNvfp4BlockSize = 16;

struct Nvfp4Matrix {
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t row_bytes = 0;              // ceil(cols / 2)
    std::vector<uint8_t> data;          // [rows, row_bytes] E2M1 codes, two per byte
    std::vector<uint8_t> block_scales;  // [rows, ceil(cols / 16)] E4M3 codes
    float tensor_scale = 1.0f;          // amax / (6 * 448)

    int64_t blocks_per_row() const { return (cols + kNvfp4BlockSize - 1) / kNvfp4BlockSize; }
};

// tensor_scale from the tensor's amax.
core::Result<Nvfp4Matrix> quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols);
// A given (calibrated) tensor_scale, > 0 and finite; blocks beyond its range saturate.
core::Result<Nvfp4Matrix> quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale);

std::vector<float> dequantize(const Nvfp4Matrix& m);

}  // namespace kiln::quant
