// Dequantizing GEMM on tensor cores for GGML block weights (prompt-sized steps; W4A16 / W8A16):
// y [m, n] f32 = x [m, k] f16 @ W^T, W [n, k] in the checkpoint's blocks (the gemv_quant formats:
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K - Q6_K). Each 32-element group of a weight row is decoded to the exact
// f32 values kernels/ref gives (kernels/cuda/block_decode.cuh), rounded to f16 in shared memory and
// multiplied with mma.sync.m16n8k16 (f16 inputs, f32 accumulation): the weights are read once per
// 64 tokens instead of being decoded to an f32 copy first. Tiles of 64 tokens x 128 weight rows x 32
// k, four warps of 32 x 64; the activation tile comes in with cp.async. Callable from plain C++.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::kernels::cuda {

// w: n rows of blocks of `type` (k a multiple of 32, of 256 for the K-quants); x [m, k] f16 (16-byte
// aligned), y [m, n] f32; device pointers. kInvalidArgument for bad sizes or null pointers (m = 0:
// nothing), kUnsupported for other types (gemv_blocks_supports says which are built).
core::Status gemm_blocks(core::DType type, const void* w, int64_t n, int64_t k, const __half* x, int64_t m, float* y,
                         cudaStream_t stream = nullptr);

}  // namespace kiln::kernels::cuda
