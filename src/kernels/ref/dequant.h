// Scalar reference dequantizers: one row of a plain or GGML block-quantized tensor -> fp32.
// These are the test oracle for every SIMD/CUDA dequantizing kernel, so they are written for
// clarity, one block at a time, with each block layout spelled out next to its decoder.
// Layouts and formulas follow ggml (ggml-common.h block_* structs, ggml-quants.c dequantize_row_*;
// nvfp4, e4m3_b32 and mxfp8 are kiln's own blocks, core/dtype.h);
// arithmetic is done in the same order as there, so results match ggml and gguf-py bit for bit.
// Invariant: `src` holds num_elements / block_size whole blocks (dtype_bytes(type, num_elements)).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::kernels::ref {

// True for the types dequantize_row handles: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1,
// q2_k, q3_k, q4_k, q5_k, q6_k, q8_k, mxfp4, nvfp4, e4m3_b32, mxfp8.
bool dequant_supported(core::DType type);

// Decodes num_elements values. kUnsupported for other types; kInvalidArgument when num_elements is
// negative or not a multiple of the type's block size.
core::Status dequantize_row(core::DType type, const void* src, float* dst, int64_t num_elements);

// The 256 ternary values t (-1, 0, 1; x = d * t) of one TQ1_0 or TQ2_0 block, in element order.
void tq_trits(core::DType type, const uint8_t* block, int8_t* t);

}  // namespace kiln::kernels::ref
